"""Writing files fast: a writer that hashes in a second thread what it writes in steps
(`_hashing_writer`), and the C library calls Python's `os` lacks (`_libc`). Imports nothing of
the package."""
