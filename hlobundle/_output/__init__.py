"""Where a bundle is written (`_target`): the output path checked, the bundle built beside it
and renamed into place. Imports `_format` and `_file_io`, so that whatever writes a bundle (the
writer, `pull`, the emitters) stands above it and nothing else of the writer's."""
