"""Files a command reads and writes, safely: atomic writes that never replace a special
file (``atomic``), outputs that may not alias inputs (``paths``), the output folder's
writer lock (``folder_lock``), per-frame file names as farms write them
(``frame_patterns``) and the one ``--frames`` parser (``frame_ranges``). Pure Python;
imports nothing of ours outside this room."""
