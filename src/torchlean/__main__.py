"""``python -m torchlean``: the same command line as the ``torchlean`` script."""

from .cli import main

raise SystemExit(main())
