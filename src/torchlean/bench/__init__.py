"""The benchmark harness behind ``torchlean bench`` (top layer, beside the command line)."""
