"""schedc's version, in a leaf module: the package root and the modules below it (the compiler's
report writes it) import it from here, so no module imports the package root for it."""

__version__ = "0.1.0"
