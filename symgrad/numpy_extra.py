"""More of NumPy's surface, each function a composition of existing primitives (written in
``symgrad.numpy_elementwise``, ``numpy_layout``, ``numpy_reductions`` and ``numpy_indexing``;
the new elementwise primitives are ``symgrad.ops_extra``'s), so derivatives, every back end and
higher orders come from the op table with nothing new to lower. This module is their table.

``FUNCTIONS`` (name -> (eager NumPy function, builder)) and ``ALIASES`` are merged into
``symgrad.numpy_api``'s tables there (one hook), which also makes ``sg.<name>`` and the
``np.<name>`` / ``math.<name>`` callables the front end recognises. Everything that depends on
static information (axes, shapes, split points, masks, repeat counts) is computed here while
tracing, with NumPy's own functions where they exist (``np.pad`` computes the index arrays of
``pad``'s index modes; ``np.flatnonzero`` a constant boolean mask's positions).
"""
from __future__ import annotations

import numpy as np

from . import ops
from . import numpy_elementwise as elementwise
from . import numpy_indexing as indexing
from . import numpy_layout as layout
from . import numpy_reductions as reductions
# what the front end (symgrad.expressions) and symgrad.numpy_api use by name
from .numpy_base import _as_array, unsupported  # noqa: F401
from .numpy_elementwise import floor_divide, imag, remainder, round_  # noqa: F401
from .numpy_indexing import advanced_index, index_trick, is_advanced  # noqa: F401
from .numpy_layout import diagonal, repeat, swapaxes, trace  # noqa: F401
from .numpy_reductions import clip, std, var  # noqa: F401

# name -> (eager NumPy function, builder). The primitives of symgrad.ops_extra come through
# ops.NUMPY_FUNCTIONS (under their NumPy names), like every elementwise primitive.
FUNCTIONS = {
    "fix": (np.fix, ops.trunc), "remainder": (np.remainder, elementwise.remainder),
    "floor_divide": (np.floor_divide, elementwise.floor_divide),
    "divmod": (np.divmod, elementwise.divmod_), "fmax": (np.fmax, elementwise.fmax),
    "fmin": (np.fmin, elementwise.fmin), "logaddexp2": (np.logaddexp2, elementwise.logaddexp2),
    "deg2rad": (np.deg2rad, elementwise.deg2rad), "rad2deg": (np.rad2deg, elementwise.rad2deg),
    "sinc": (np.sinc, elementwise.sinc), "isnan": (np.isnan, elementwise.isnan),
    "isinf": (np.isinf, elementwise.isinf), "isfinite": (np.isfinite, elementwise.isfinite),
    "signbit": (np.signbit, elementwise.signbit), "copysign": (np.copysign, elementwise.copysign),
    "nan_to_num": (np.nan_to_num, elementwise.nan_to_num), "round": (np.round, elementwise.round_),
    "positive": (np.positive, elementwise.positive), "real": (np.real, elementwise.real),
    "imag": (np.imag, elementwise.imag), "conj": (np.conj, elementwise.real),
    "moveaxis": (np.moveaxis, layout.moveaxis), "swapaxes": (np.swapaxes, layout.swapaxes),
    "rollaxis": (np.rollaxis, layout.rollaxis),
    "expand_dims": (np.expand_dims, layout.expand_dims), "squeeze": (np.squeeze, layout.squeeze),
    "ravel": (np.ravel, layout.ravel), "flip": (np.flip, layout.flip),
    "fliplr": (np.fliplr, layout.fliplr), "flipud": (np.flipud, layout.flipud),
    "roll": (np.roll, layout.roll), "rot90": (np.rot90, layout.rot90),
    "tile": (np.tile, layout.tile), "repeat": (np.repeat, layout.repeat),
    "pad": (np.pad, layout.pad), "atleast_1d": (np.atleast_1d, layout.atleast_1d),
    "atleast_2d": (np.atleast_2d, layout.atleast_2d),
    "atleast_3d": (np.atleast_3d, layout.atleast_3d), "diag": (np.diag, layout.diag),
    "diagonal": (np.diagonal, layout.diagonal), "trace": (np.trace, layout.trace),
    "tril": (np.tril, layout.tril), "triu": (np.triu, layout.triu),
    "vstack": (np.vstack, layout.vstack), "hstack": (np.hstack, layout.hstack),
    "dstack": (np.dstack, layout.dstack), "column_stack": (np.column_stack, layout.column_stack),
    "split": (np.split, layout.split), "array_split": (np.array_split, layout.array_split),
    "vsplit": (np.vsplit, layout.vsplit), "hsplit": (np.hsplit, layout.hsplit),
    "dsplit": (np.dsplit, layout.dsplit), "append": (np.append, layout.append),
    "diff": (np.diff, layout.diff), "gradient": (np.gradient, layout.gradient),
    "var": (np.var, reductions.var), "std": (np.std, reductions.std),
    "mean": (np.mean, reductions.mean), "average": (np.average, reductions.average),
    "ptp": (np.ptp, reductions.ptp), "cov": (np.cov, reductions.cov),
    "corrcoef": (np.corrcoef, reductions.corrcoef), "trapezoid": (np.trapezoid, layout.trapezoid),
    "clip": (np.clip, reductions.clip), "select": (np.select, reductions.select),
    "linspace": (np.linspace, reductions.linspace), "norm": (np.linalg.norm, reductions.norm),
    "take_along_axis": (np.take_along_axis, indexing.take_along_axis),
    "take": (np.take, indexing.take),
    "broadcast_arrays": (np.broadcast_arrays, layout.broadcast_arrays),
    "meshgrid": (np.meshgrid, layout.meshgrid),
    "count_nonzero": (np.count_nonzero, reductions.count_nonzero),
    "nansum": (np.nansum, reductions.nansum), "nanprod": (np.nanprod, reductions.nanprod),
    "nanmax": (np.nanmax, reductions.nanmax), "nanmin": (np.nanmin, reductions.nanmin),
    "nanmean": (np.nanmean, reductions.nanmean), "nanvar": (np.nanvar, reductions.nanvar),
    "nanstd": (np.nanstd, reductions.nanstd), "allclose": (np.allclose, reductions.allclose),
    "any": (np.any, reductions.any_), "all": (np.all, reductions.all_),
    "isclose": (np.isclose, elementwise.isclose), "heaviside": (np.heaviside, elementwise.heaviside),
    "float_power": (np.float_power, elementwise.float_power),
}
# alias -> name (as symgrad.numpy_api.ALIASES)
ALIASES = {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "mod": "remainder",
           "around": "round", "round_": "round", "degrees": "rad2deg", "radians": "deg2rad",
           "conjugate": "conj", "row_stack": "vstack", "gammaln": "lgamma", "psi": "digamma"}

# Order statistics and scans, contractions, linear algebra: their modules' tables join this one.
from . import numpy_contractions, numpy_linalg, numpy_polynomials, numpy_sorting  # noqa: E402
for _module in (numpy_contractions, numpy_linalg, numpy_polynomials, numpy_sorting):
    FUNCTIONS.update(_module.FUNCTIONS)
    ALIASES.update(_module.ALIASES)
