"""A bundle's bytes through the machinery of the ground floor, as the format's coded errors: a
bundle's files reached by the path rules (`_opening`), tensor files opened as checked and held
(`_tensors`), written and read, hashed in a second thread with progress bars
(`_tensor_writing`, `_tensor_reading`), and signature files read (`_signature_file`) and
signatures made and checked through model-signing (`_signing`). What parses a bundle's
programs, in this process or in a child, is `_parse`, beside it.
Imports `_format` and the ground floor only."""
