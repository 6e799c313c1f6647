"""Capacity planning: ``python -m app plan`` sizes a pipeline from its traffic.

- ``figures.json`` / ``figures.py``: the measured figures, each citing the results file and row
  of the benchmark that measured it;
- ``model.py``: the sizing arithmetic (pure; the formula is in docs/operations.md, "Sizing a
  pipeline");
- ``report.py``: the command line and the text an operator reads.
"""
