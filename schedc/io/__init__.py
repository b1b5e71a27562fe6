"""Files in and out: torch's schedule CSV and the report beside it (``csvio``), and reading with
a size bound and writing all-or-nothing without harming what is at the path (``fileio``)."""
