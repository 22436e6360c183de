"""What the package shows a person at a terminal: text it did not write, escaped, tables and
sizes (`_display`), and progress bars a front end turns on (`_progress`). Imports nothing of
the package."""
