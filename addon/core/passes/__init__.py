"""The fast pass engine's maths: the camera as plain numbers (``camera``), the numpy
triangle rasteriser and its compiled twin (``raster``, ``raster_jit``, over the optional
numba of ``jit``), light visibility by shadow mapping (``shadow``), and how float passes
become the images ControlNets and people read (``encodings``). Pure Python + numpy; may
import ``core.rig``."""
