"""In-place writes into arrays (a mixin of :class:`symgrad.frontend.Tracer`): ``a[k] = v``
as a functional update, and rows of arrays as views.

A loop over the rows of an array (``for row in A``, ``for i, row in enumerate(A)``,
``for a, b in zip(A, B)``) binds each row as NumPy does: a view, so ``row[j] = v`` and
``row += v`` write into ``A``. The IR is functional, so such a write is a functional update
of the row and of ``A``'s row (in a loop region ``A`` is then carried). It is allowed where
NumPy's write is one symgrad can give: ``A`` is memory the function made and no other live name
but the row may see it; a row of the caller's array (an argument) or of a global is refused.
The view lasts while the loop variable holds the row and ``A`` names the same memory
(:class:`symgrad.aliases.RowView`); rebinding either ends it.
"""
from __future__ import annotations

import ast
import numbers
from dataclasses import dataclass, replace

import numpy as np

from . import index_writes, ops
from .aliases import NO_BUFFERS, RowView, in_place_result, is_array
from .errors import UnsupportedSyntaxError
from .expressions import check_static_key
from .ir import INT_DTYPES, Node
from .numpy_indexing import has_window, is_advanced, window_write
from .loop_plan import row_view_pairs
from .padded_slices import WHY, has_traced_slice
from .scope import Frame, walk_nodes


class ArrayWrites:
    """Item writes, binding loop variables as row views and writing through them."""

    def item_written(self, container, key, value, node):
        """``container`` with ``container[key] = value`` done (functionally); ``value`` may be
        a :class:`MaskedUpdate` (``y[mask] += v``)."""
        if isinstance(value, MaskedUpdate):
            return self.mask_updated(container, key, value, node)
        bounds = isinstance(key, Node) and isinstance(container, Node) and \
            self.in_bounds(key, container)
        if bounds:                             # y[i] = v with i a loop index
            return ops.row_update(container, key, value, from_end=bounds[0] < 0)
        if has_traced_slice(key):              # y[:i] = v: its length varies (unrolled)
            self.fail(node, "a write into a slice whose length depends on a loop index", WHY)
        if has_window(key):                    # y[i:i + k] = v with i a loop index
            if not isinstance(_lift_constant(container), Node):
                self.fail(node, f"a slice with traced bounds into a {type(container).__name__}")
            return self.traced(node, window_write, _lift_constant(container), key, value,
                               getattr(self, "index_ranges", {}))
        if _is_mask(key) and (_is_traced_mask(key) or not np.ndim(value)):
            return self.mask_written(container, key, value, node)
        if _all_constant(container, key, value):
            updated = container.copy()         # a constant array written with a constant:
            updated[key] = value               # NumPy's own semantics, still a constant
            return updated
        if is_advanced(key):                   # y[idx] = v, y[rows, cols] = v, y[mask] = v
            return self.traced(node, index_writes.assign, _lift_constant(container), key, value,
                               getattr(self, "index_ranges", {}))
        check_static_key(self, key, node)
        return ops.setitem(_lift_constant(container), value, key)

    def ufunc_at(self, fn, call, args, kwargs, frame: Frame):
        """``np.add.at(y, key, v)`` (and ``np.subtract.at``) on a variable ``y``: the unbuffered
        scatter-add, written into ``y`` (and through a row view, the row's array)."""
        name = _callable_name(fn)
        sign = index_writes.UFUNC_AT.get(fn.__self__.__name__)
        if sign is None:
            self.fail(call, f"{name} on traced values", index_writes.UFUNC_AT_WHY)
        if kwargs or len(args) != 3:
            self.fail(call, f"{name} with {len(args)} arguments{' and keywords' if kwargs else ''}",
                      f"call it as {name}(y, indices, values)")
        target = call.args[0]
        if not isinstance(target, ast.Name):
            self.fail(call, f"{name} into an expression", f"name the array: {name}(y, indices, values)")
        container, key, value = args
        if not isinstance(container, (Node, np.ndarray)) or not is_array(container):
            self.fail(call, f"{name} into {type(container).__name__} '{target.id}'",
                      "the first argument must be an array the function made")
        view = self.check_write_into(target.id, frame, call, f"{name} into")
        _check_same_kind(name, container, value)
        if sign < 0:
            value = -ops.lift(value) if isinstance(value, Node) else -np.asarray(value)
        if _all_constant(container, key, value):
            updated = container.copy()
            np.add.at(updated, key, value)
        elif is_advanced(key):
            updated = self.traced(call, index_writes.accumulate, _lift_constant(container), key,
                                  value, getattr(self, "index_ranges", {}))
        else:                                  # a basic index: no position repeats
            check_static_key(self, key, call)
            updated = ops.index_add(_lift_constant(container), value, key)
        self.written(target.id, updated, view, frame, call)

    def fill_diagonal(self, call, args, kwargs, frame: Frame):
        """``np.fill_diagonal(a, val, wrap=False)``: ``a``'s diagonal written as NumPy's flat
        write ``a.flat[:end:step] = val`` does (unsafe casting, ``val`` repeated)."""
        if len(call.args) < 2 or len(args) > 3 or set(kwargs) - {"wrap"}:
            self.fail(call, "np.fill_diagonal with these arguments",
                      "np.fill_diagonal(a, val, wrap=False)")
        wrap = kwargs.get("wrap", args[2] if len(args) > 2 else False)
        filled = index_writes.diagonal_filled(args[0], args[1], wrap)
        self.write_out(call.args[0], filled, frame, call, "np.fill_diagonal", "unsafe")
        self.origins[call] = NO_BUFFERS   # np.fill_diagonal returns None

    def write_out(self, target, value, frame: Frame, call, what: str, casting="same_kind"):
        """NumPy writing ``value`` into the array ``target`` names (``out=y``, ``out=y[1:]``,
        ``np.copyto(y, v)``): ``y[...] = value`` (or ``y[1:] = value``) with an item
        assignment's checks (no argument, global or alias is written), ``value`` cast to
        ``y``'s dtype under ``casting``. Returns the written array's new value (the call's
        result in NumPy is ``y`` itself: the caller records it as living there)."""
        root = target.value if isinstance(target, ast.Subscript) else target
        if not isinstance(root, ast.Name):
            self.fail(call, f"{what} into an expression", f"name the array: {what}(..., y)")
        container = frame.lookup(root.id, root)
        if isinstance(target, ast.Subscript):
            key = self.eval(target.slice, frame)
            destination = self.eval(target, frame)
        else:
            key, destination = Ellipsis, container
        if not isinstance(destination, (Node, np.ndarray)) or not is_array(destination):
            kind = "a scalar" if isinstance(destination, (Node, np.generic, numbers.Number)) \
                else f"a {type(destination).__name__}"
            self.fail(call, f"{what} into '{root.id}', {kind}",
                      "the output must be an array the function made (y = np.zeros(n))")
        if casting != "unsafe":
            _check_cast(what, destination, value, casting)
        value = ops.cast(ops.lift(value), destination.dtype if isinstance(destination, Node)
                         else destination.dtype.name)
        if np.broadcast_shapes(value.shape, destination.shape) != tuple(destination.shape):
            raise ValueError(f"{what}: a result of shape {value.shape} does not fit the output "
                             f"of shape {tuple(destination.shape)}")
        subscript = target if isinstance(target, ast.Subscript) else ast.copy_location(
            ast.Subscript(value=target, slice=ast.Constant(value=Ellipsis), ctx=ast.Store()), target)
        self.assign_item(subscript, value, frame, call, key)
        updated = frame.env[root.id]
        return updated if key is Ellipsis else self.eval(target, frame)

    def traced(self, node, build, *args):
        """``build(*args)``, a refusal raised at the user's line."""
        try:
            return build(*args)
        except UnsupportedSyntaxError as e:
            if e.lineno:
                raise
            self.fail(node, e.construct, e.hint)

    def mask_written(self, container, mask, value, node):
        """``y[mask] = v`` with a boolean mask over y's leading axes (``y[y < 0] = 0.0``) and
        one value for every selected element: a select, ``where(mask, v, y)``."""
        mask, target = ops.lift(mask), ops.lift(container)
        self.check_mask_covers(mask, target, node)
        if not isinstance(value, (Node, np.ndarray, np.generic, int, float, bool)) or np.ndim(value):
            self.fail(node, "y[mask] = v with an array v (its length would be the mask's count)",
                      "write one value (y[mask] = 0.0) or use np.where(mask, v, y)")
        mask = ops.reshape(mask, mask.shape + (1,) * (target.ndim - mask.ndim))
        return ops.where(mask, ops.cast(ops.lift(value, target.dtype), target.dtype), target)

    def check_mask_covers(self, mask: Node, target: Node, node):
        if mask.shape != target.shape[:mask.ndim]:
            self.fail(node, f"a boolean mask of shape {mask.shape} writing into an array of shape "
                      f"{target.shape}", "the mask covers the array's leading axes, as in NumPy")

    def mask_updated(self, container, mask, update: "MaskedUpdate", node):
        """``y[mask] <op>= v`` with a boolean mask from data: NumPy's ``y[mask] = y[mask] <op> v``
        with ``v`` broadcast to the selection, which does not depend on the mask's count when
        ``v`` has no axis of that count (a scalar, or one value per trailing axis of ``y``).
        Then it is ``where(mask, y <op> v, y)`` (``y <op> v`` under NumPy's in-place rules:
        ``y``'s dtype, a same_kind cast), whose derivative is the select's."""
        mask, target = ops.lift(mask), _lift_constant(container)
        target = ops.lift(target)
        self.check_mask_covers(mask, target, node)
        trailing = target.shape[mask.ndim:]
        operand = update.operand
        shape = tuple(np.shape(operand))
        while len(shape) > len(trailing) and shape[0] == 1:   # leading length-1 axes: dropped
            shape = shape[1:]
        symbol = AUGMENTED_SYMBOLS.get(type(update.op), "<op>")
        if len(shape) > len(trailing):
            self.fail(node, f"y[mask] {symbol}= v with a boolean mask from data and an array v of "
                      f"shape {tuple(np.shape(operand))} (its length would be the mask's count)",
                      f"update by one value (y[mask] {symbol}= 2.0) or use "
                      f"np.where(mask, y {symbol} v, y) with v of y's shape")
        if shape != tuple(np.shape(operand)):
            operand = ops.reshape(ops.lift(operand), shape)
        updated = in_place_result(target, self.binop(update.op, target, operand, node))
        mask = ops.reshape(mask, mask.shape + (1,) * len(trailing))
        return ops.where(mask, updated, target)

    def bind_row_views(self, stmt, frame: Frame, index):
        """The loop variables just bound to row ``index`` (a Python int or the loop index
        node) of an array the loop names are views of it: a write into one writes into it."""
        for name, base in row_view_pairs(stmt):
            self.bind_row_view(name, base, index, frame)

    def element_written(self, target, key, value, frame: Frame):
        """``A[i][j] = v`` with ``A`` an array, ``i`` an integer: ``A[i, j] = v`` (NumPy writes
        through the row's view). ``xs[t][k] = v`` with ``xs`` a list or dict of arrays (min-char-rnn's one-hot
        ``xs[t][inputs[t]] = 1``): the array in that slot updated functionally. Allowed where
        NumPy's write is seen through that slot only: the container holds no memory the
        function did not make, no live name but those bound to the container shares memory
        with anything in it, and no other slot holds the same array. The last test is by
        identity, and equal arrays built the same way are one node (hash-consing), so
        ``[np.zeros_like(x) for _ in r]`` is refused: a 2-d array is the way there."""
        outer_expr = target.value
        outer = self.eval(outer_expr.value, frame) if isinstance(outer_expr, ast.Subscript) else None
        if isinstance(outer, (Node, np.ndarray)) and isinstance(outer_expr.value, ast.Name):
            slot = self.eval(outer_expr.slice, frame)   # A[i][j] = v: A[i] is a view of row i
            if isinstance(slot, numbers.Integral) or (isinstance(slot, Node) and slot.ndim == 0
                                                      and slot.dtype in INT_DTYPES):
                whole = ast.copy_location(ast.Subscript(value=outer_expr.value, slice=target.slice,
                                                        ctx=ast.Store()), target)
                rest = key if isinstance(key, tuple) else (key,)
                return self.assign_item(whole, value, frame, target, (slot,) + rest)
        if not isinstance(outer, (list, dict)) or not isinstance(outer_expr.value, ast.Name):
            self.fail(target, "item assignment into an expression (only 'name[index] = value', "
                      "'A[i][j] = value' for an array 'A' and an integer 'i', and "
                      "'xs[t][k] = value' for a list or dict 'xs' of arrays)")
        name = outer_expr.value.id
        slot = self.eval(outer_expr.slice, frame)
        element = outer[slot]
        if not isinstance(element, (Node, np.ndarray)) or np.ndim(element) == 0:
            self.fail(target, f"item assignment into an element of '{name}' that is not an array")
        self.check_traced_state(outer_expr.value, frame, target, "item assignment into")
        buffers = frame.buffers_of(name)
        owners = sorted(b.owner for b in buffers if b.owner)
        aliases = tuple(n for n, v in frame.env.items() if v is outer)
        other = owners[0] if owners else self.sharing_name(name, frame, buffers, aliases)
        if other is not None:
            self.fail(target, f"item assignment into an element of '{name}', which may share "
                      f"memory with {other} (writing would change it too, and symgrad updates "
                      "arrays functionally)", f"store a copy: {name}[...] = value.copy()")
        items = outer.items() if isinstance(outer, dict) else enumerate(outer)
        if any(k != slot and _same_array(v, element) for k, v in items):
            self.fail(target, f"item assignment into an element of '{name}' whose array another "
                      f"element of '{name}' holds too (or an equal one built the same way: "
                      "symgrad cannot tell them apart)",
                      f"keep the elements in one array: {name} = np.zeros((n, ...)); "
                      f"{name}[i, j] = value")
        outer[slot] = self.item_written(element, key, value, target)

    def check_write_into(self, name: str, frame: Frame, node, what: str):
        """Refuse an in-place write into ``name`` that NumPy would make elsewhere too; the
        row view (symgrad.aliases.RowView) it writes through, if it is one."""
        view = self.row_view(name, frame)
        if view is None:
            self.check_writable(name, frame, node, what)
        else:   # the row's array is written: it must be writable, by no other name than the row
            self.check_writable(view.base, frame, node, f"{what} '{name}', a row of",
                                besides=(name,))
        return view

    def written(self, name: str, value, view, frame: Frame, stmt):
        """``name`` now holds ``value`` after an in-place write; through a row view, the row
        of its array too (a functional update of that row)."""
        frame.env[name] = value
        self.record(frame, stmt, value, name)
        if view is None:
            return
        base = frame.env[view.base]
        if isinstance(view.index, Node) and not (isinstance(base, Node) and self.in_bounds(view.index, base)):
            self.fail(stmt, f"a write into '{name}', a row of '{view.base}' at an index not known "
                      "to be in bounds")
        updated = self.item_written(base, view.index, value, stmt)
        frame.env[view.base] = updated
        self.record(frame, stmt, updated, view.base)
        frame.views[name] = replace(view, value=value)

    def row_view(self, name: str, frame: Frame):
        """The row view ``name`` is, while it is valid (the variable still holds the row and
        its array's name the same memory); else None."""
        view = frame.views.get(name)
        if view is None or frame.env.get(name) is not view.value or view.base not in frame.env \
                or frame.buffers.get(view.base) != view.buffers:
            return None
        return view

    def bind_row_view(self, name: str, base: str, index, frame: Frame):
        """``name`` was just bound to row ``index`` of the array ``base`` names (a loop's
        item): a view of it, when both are arrays living in the same memory."""
        buffers = frame.buffers.get(name)
        if buffers and base in frame.env and frame.buffers.get(base) == buffers and \
                is_array(frame.env.get(name)):
            frame.views[name] = RowView(base, index, frame.env[name], buffers)


@dataclass(frozen=True)
class MaskedUpdate:
    """What ``y[mask] <op>= v`` writes through a boolean mask from data (``op``: the ast
    operator, ``operand``: ``v``): ``y[mask]`` itself cannot be read (its length depends on
    the data), so the tracer hands the update to :meth:`ArrayWrites.mask_updated`."""
    op: ast.operator
    operand: object


# ast operator -> its symbol, for messages about ``y[mask] <op>= v``
AUGMENTED_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                     ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&",
                     ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


def is_masked_update(container, key) -> bool:
    """``container[key] <op>= v`` is a :class:`MaskedUpdate`: an array and a mask from data."""
    return _is_traced_mask(key) and isinstance(container, (Node, np.ndarray))


def is_ufunc_at(fn) -> bool:
    """``np.add.at``, ``np.multiply.at``, ...: the in-place method of a ufunc."""
    return isinstance(getattr(fn, "__self__", None), np.ufunc) and getattr(fn, "__name__", "") == "at"


def _callable_name(fn) -> str:
    return f"np.{fn.__self__.__name__}.at"


def _all_constant(container, key, value) -> bool:
    """A constant array, key and value: NumPy's own write gives the result, still a constant."""
    return isinstance(container, np.ndarray) and not any(
        True for _ in walk_nodes([key, value]))


def _check_same_kind(name: str, container, value):
    """NumPy's ufunc casting rule for the output of np.add.at: 'same_kind'."""
    _check_cast(name, container, value, "same_kind")


def _check_cast(name: str, container, value, casting: str):
    """NumPy's casting rule (``casting``: 'same_kind' for a ufunc's output and np.copyto)."""
    dtype = np.dtype(container.dtype if isinstance(container, Node) else container.dtype)
    if isinstance(value, Node):
        operand = np.dtype(value.dtype)
    elif isinstance(value, (bool, int, float, complex)):
        operand = value                       # a Python number: weakly typed (NEP 50)
    else:
        operand = np.asarray(value).dtype
    result = np.result_type(dtype, operand)
    if not np.can_cast(result, dtype, casting):
        raise TypeError(f"{name}: cannot cast ufunc output from {result!r} to {dtype!r} with "
                        f"casting rule {casting!r}")


def _is_traced_mask(key) -> bool:
    return isinstance(key, Node) and key.dtype == "bool" and key.ndim >= 1


def _is_mask(key) -> bool:
    """A boolean array index (traced or constant), not a tuple of them."""
    return (isinstance(key, Node) and key.dtype == "bool" and key.ndim >= 1) or \
        (isinstance(key, np.ndarray) and key.dtype == bool and key.ndim >= 1)


def _lift_constant(array):
    """A constant array written with traced values becomes a node at that first write: a
    ``full`` node when every element is one value (np.zeros(n), np.ones(n), np.full), so the
    generated code reads np.zeros(n) rather than a table."""
    if not isinstance(array, np.ndarray):
        return array
    if array.size and array.dtype.name in ("float32", "float64", "bool") + INT_DTYPES \
            and bool(np.all(array == array.flat[0])) \
            and bool(np.all(np.signbit(array) == np.signbit(array.flat[0]))):   # -0.0 stays
        return ops.full(array.shape, array.flat[0].item(), array.dtype.name)
    return ops.lift(array)


def _same_array(v, element) -> bool:
    """Whether ``v`` is ``element`` (a traced array: the same node) or shares its memory (a
    constant array)."""
    if isinstance(element, Node):
        return v is element
    return isinstance(v, np.ndarray) and np.may_share_memory(v, element)
