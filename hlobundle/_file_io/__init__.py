"""Writing files fast and durably: a writer that hashes in a second thread what it writes in
steps (`_hashing_writer`), files and trees fsynced and renamed into place (`_durable`), and the
C library calls Python's `os` lacks (`_libc`), and a small file read up to a limit
(`_bounded`). Imports nothing of the package."""
