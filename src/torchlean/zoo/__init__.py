"""Layer 5, the zoo: the bundled models and datasets of ``torchlean train``, and reloading them.

``models`` builds the mlp, cnn and transformer from a plain config dict; ``datasets`` loads the
digits, iris and adder tables (nothing is downloaded). ``load_trained``, ``read_config`` and
``check_fits`` (in ``trained``) rebuild a saved model and check it can take a dataset.
"""
