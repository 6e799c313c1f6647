"""Adapters of the libraries' private internals: each library's in one module, the only one
that names them (``faust_privates.py``: Faust's and mode's; ``aiokafka_privates.py``:
aiokafka's)."""
