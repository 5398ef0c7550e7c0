"""Optimizers with Keras semantics: ``SGD`` (momentum, Nesterov), ``Adam`` (AMSGrad),
``RMSProp`` (centered, momentum) and ``Adagrad``, with Keras's ``clipnorm``, ``clipvalue`` and
``global_clipnorm`` options.

The update formulas are those of Keras 3 (``keras/src/optimizers/*.py``, which is what
``tf.keras.optimizers`` is from TensorFlow 2.16 on), operation for operation; each class says
which. They agree with the TF 2.11-2.15 Keras 2 optimizers except where noted.

How a step runs: ``minimize`` gets the loss value and every gradient from one compiled
``value_and_grad`` call; ``apply_gradients`` computes the clipping factors (one reduction per
gradient for the norm options) and then, for each variable, calls one compiled *update kernel*
(a symgrad function of the variable, its slots, the gradient and 0-d hyperparameters) that
clips the gradient and updates the variable and its slots in a single pass over memory.

The kernel's outputs never alias its inputs: each slot is double-buffered (the kernel reads the
current slots and writes, with ``out=``, into the spare ones, which then become current) and the
new variable goes to a per-variable scratch array that is copied into the caller's array. A
kernel writing into memory it also reads would make the CPU back end (which declares its
buffers ``noalias``) fall back to fresh outputs plus a copy per output, which costs 3-4x at 10^5
elements. The price is memory: twice the slots plus one copy of each variable.

Variables are NumPy float arrays (0-d arrays for scalars, strided views allowed) updated in
place; slots (moments, accumulators) are arrays of the variable's shape and dtype.
"""
from __future__ import annotations

import math
import warnings
import weakref

import numpy as np

from .. import api
from .clip import clip_by_value, global_norm_scale
from ..runtime import value_leaves

# -- the compiled kernels: plain NumPy code traced by symgrad ------------------------------------
# Every kernel is ``kernel(var, *slots, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, *hyper)`` and
# returns the new variable and slots. ``mode`` is a static int and ``wd`` a static None when
# there is no weight decay (the kernel is specialised on both); the rest are 0-d arrays of the
# variable's dtype.
NO_CLIP, SCALE, VALUE = 0, 1, 2


def _effective_grad(g, mode, g_mul, g_div, lo, hi):
    """The gradient after the optimizer's clipping: ``g * g_mul / g_div`` is TF's
    ``clip_by_norm`` (``g_mul = clip_norm``, ``g_div = max(norm, clip_norm)``) and
    ``clip_by_global_norm`` (``g_mul = scale``, ``g_div = 1``); ``VALUE`` is ``clip_by_value``."""
    if mode == SCALE:
        return g * g_mul / g_div
    if mode == VALUE:
        return clip_by_value(g, lo, hi)
    return g


def _weight_decayed(var, wd, lr):
    """Keras's decoupled weight decay, ``var - var * weight_decay * learning_rate``, applied
    before the update; ``wd`` is a static ``None`` when there is none."""
    if wd is None:
        return var
    return var - var * wd * lr


def _sum_of_squares(g):
    return np.sum(g * g)


def _sgd_kernel(var, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, lr):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    return var - g * lr


def _sgd_momentum_kernel(var, m, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, lr, momentum,
                         nesterov):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    m = m * momentum - g * lr
    if nesterov:
        return var + (m * momentum - g * lr), m
    return var + m, m


def _adam_kernel(var, m, v, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, alpha, one_minus_beta_1,
                 one_minus_beta_2, epsilon):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    m = m + (g - m) * one_minus_beta_1
    v = v + (g * g - v) * one_minus_beta_2
    return var - m * alpha / (np.sqrt(v) + epsilon), m, v


def _adam_amsgrad_kernel(var, m, v, v_hat, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, alpha,
                         one_minus_beta_1, one_minus_beta_2, epsilon):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    m = m + (g - m) * one_minus_beta_1
    v = v + (g * g - v) * one_minus_beta_2
    v_hat = np.maximum(v_hat, v)
    return var - m * alpha / (np.sqrt(v_hat) + epsilon), m, v, v_hat


def _rmsprop_kernel(var, velocity, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, lr, rho,
                    one_minus_rho, epsilon):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    velocity = rho * velocity + one_minus_rho * (g * g)
    return var - lr * g / np.sqrt(velocity + epsilon), velocity


def _rmsprop_general_kernel(var, velocity, average_grad, moment, g, mode, g_mul, g_div, lo, hi,
                            wd, wd_lr, lr, rho, one_minus_rho, epsilon, momentum):
    """RMSProp with ``centered`` (``average_grad`` is not None) and/or momentum (``moment``
    is not None); both Nones are static, so each combination is its own kernel."""
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    velocity = rho * velocity + one_minus_rho * (g * g)
    if average_grad is None:
        denominator = velocity + epsilon
    else:
        average_grad = rho * average_grad + one_minus_rho * g
        denominator = velocity - average_grad * average_grad + epsilon
    increment = lr * g / np.sqrt(denominator)
    if moment is None:
        return var - increment, velocity, average_grad
    moment = momentum * moment + increment
    if average_grad is None:
        return var - moment, velocity, moment
    return var - moment, velocity, average_grad, moment


def _adagrad_kernel(var, accumulator, g, mode, g_mul, g_div, lo, hi, wd, wd_lr, lr, epsilon):
    var = _weight_decayed(var, wd, wd_lr)
    g = _effective_grad(g, mode, g_mul, g_div, lo, hi)
    accumulator = accumulator + g * g
    return var - lr * g / np.sqrt(accumulator + epsilon), accumulator


_KERNELS: dict = {}


def _kernel(fn, target):
    """One compiled symgrad Function per (kernel, target), shared by every optimizer."""
    key = (fn, target)
    if key not in _KERNELS:
        _KERNELS[key] = api.differentiate(fn, target=target)
    return _KERNELS[key]


# loss function -> {(number of variables, target): its value_and_grad Function}
_VALUE_AND_GRADS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _value_and_grad(loss, n_vars, target):
    per_loss = _VALUE_AND_GRADS.setdefault(loss, {})
    key = (n_vars, target)
    if key not in per_loss:
        wrt = tuple(range(n_vars))
        if isinstance(loss, api.Function):
            per_loss[key] = api.value_and_grad(loss, wrt)
        else:
            per_loss[key] = api.value_and_grad(loss, wrt, target=target)
    return per_loss[key]


def _check_variable(var):
    if not isinstance(var, np.ndarray) or var.dtype.kind != "f":
        raise TypeError("optimizer variables must be float NumPy arrays (0-d arrays for scalars) "
                        f"so they can be updated in place; got {type(var).__name__}"
                        + (f" of dtype {var.dtype}" if isinstance(var, np.ndarray) else ""))
    if not var.flags.writeable:
        raise ValueError("optimizer variable is read-only")


class Optimizer:
    """Base class: gradients, clipping, slots and the step counter.

    learning_rate:   a float, or a callable ``schedule(iterations) -> float`` (as Keras's
                     ``LearningRateSchedule``), evaluated once per ``apply_gradients``.
    clipnorm:        clip each gradient to this L2 norm (``clip_by_norm``).
    global_clipnorm: clip all gradients together to this global norm (``clip_by_global_norm``).
    clipvalue:       clip each gradient element to ``[-clipvalue, clipvalue]``.

    As in Keras, ``clipnorm`` and ``global_clipnorm`` are exclusive, and when a norm option is
    set ``clipvalue`` is not applied (Keras's ``_clip_gradients`` checks ``clipnorm``, then
    ``global_clipnorm``, then ``clipvalue``); options that are ``None`` or ``<= 0`` are off.
    Clipping happens in ``apply_gradients``, after ``None`` gradients are dropped.

    weight_decay:    Keras's decoupled weight decay: before its update each variable becomes
                     ``var - var * weight_decay * learning_rate`` (fused into the update kernel);
                     ``exclude_from_weight_decay(var_list)`` exempts variables (biases, say).
    ``target`` is the symgrad target of the compiled kernels and of the loss gradient.
    """

    def __init__(self, learning_rate, *, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 weight_decay=None, name=None, target="cpu"):
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError("Only one of `clipnorm` and `global_clipnorm` can be set; got "
                             f"clipnorm={clipnorm}, global_clipnorm={global_clipnorm}")
        self.learning_rate = learning_rate
        self.clipnorm, self.clipvalue, self.global_clipnorm = clipnorm, clipvalue, global_clipnorm
        self.name = name or type(self).__name__
        self.target = target
        self.weight_decay = None if weight_decay is None else float(weight_decay)
        self._no_decay: dict = {}   # id(var) -> var, for variables exempt from weight decay
        self.iterations = 0
        self._state: dict = {}   # id(var) -> _VariableState

    # -- public API -----------------------------------------------------------------------------
    def compute_gradients(self, loss, var_list, *data):
        """``[(gradient, variable)]`` of ``loss(*var_list, *data)`` (gradients of the sum of its
        outputs), from one compiled ``value_and_grad`` call; the value is kept in
        ``self.last_loss``. ``var_list`` may be a dict (or another pytree) of arrays: ``loss``
        then takes it as its first parameter, ``loss(var_list, *data)``, and the pairs are
        its leaves' (dicts in sorted key order)."""
        if isinstance(var_list, dict):
            if not var_list:
                raise ValueError("var_list is empty")
            value, (grads,) = _value_and_grad(loss, 1, self.target)(var_list, *data)
            self.last_loss = value
            return list(zip(value_leaves(grads), value_leaves(var_list), strict=True))
        var_list = list(var_list)
        if not var_list:
            raise ValueError("var_list is empty")
        value, grads = _value_and_grad(loss, len(var_list), self.target)(*var_list, *data)
        self.last_loss = value
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars):
        """Clip the gradients, then update each variable (and its slots) in place with one
        compiled kernel call. Pairs whose gradient is ``None`` are skipped (Keras warns too);
        all ``None`` is an error. Increments ``iterations``; returns it."""
        pairs = list(grads_and_vars)
        kept = [(g, v) for g, v in pairs if g is not None]
        if not kept:
            raise ValueError("No gradients provided for any variable: "
                             f"{[np.shape(v) for _, v in pairs]}")
        if len(kept) < len(pairs):
            warnings.warn(f"{self.name}: gradients do not exist for {len(pairs) - len(kept)} "
                          "variable(s); they are not updated", stacklevel=2)
        grads, variables = [], []
        for g, var in kept:
            _check_variable(var)
            g = np.asarray(g, dtype=var.dtype, order="C")   # (ascontiguousarray makes 0-d 1-d)
            if g.shape != var.shape:
                raise ValueError(f"gradient of shape {g.shape} for a variable of shape {var.shape}")
            grads.append(g)
            variables.append(var)
        lr = self.learning_rate
        lr = lr(self.iterations) if callable(lr) else lr
        clips = self._clip_parameters(grads)
        for g, var, (mode, g_mul, g_div, lo, hi) in zip(grads, variables, clips):
            dt = var.dtype
            if self.weight_decay is None or self._no_decay.get(id(var)) is var:
                decay = (None, None)
            else:
                decay = (_scalar(self.weight_decay, dt), _scalar(lr, dt))
            clip_args = (mode, _scalar(g_mul, dt), _scalar(g_div, dt), _scalar(lo, dt),
                         _scalar(hi, dt), *decay)
            state = self._state_for(var)
            kernel, slot_args, hyper = self._step(state.slots, dt, float(lr))
            _kernel(kernel, self.target)(var, *slot_args, g, *clip_args, *hyper,
                                         out=(state.scratch, *state.spare))
            np.copyto(var, state.scratch)
            state.slots, state.spare = state.spare, state.slots
        self.iterations += 1
        return self.iterations

    def minimize(self, loss, var_list, *data):
        """One step: value and gradients of ``loss(*var_list, *data)`` in one compiled call,
        then ``apply_gradients``. Returns the loss value before the step."""
        self.apply_gradients(self.compute_gradients(loss, var_list, *data))
        return self.last_loss

    def exclude_from_weight_decay(self, var_list):
        """Variables that ``weight_decay`` leaves alone (Keras's method, by variable)."""
        self._no_decay.update((id(v), v) for v in var_list)

    def get_slot(self, var, name):
        """The current slot array of ``var`` by name (``"momentum"``, ``"m"``, ``"v"``, ...).
        Slots are double-buffered, so ask again after a step rather than keeping the array."""
        state = self._state.get(id(var))
        if state is None or state.var is not var:
            raise KeyError(f"{self.name} has no slots for this variable yet")
        return dict(zip(self.slot_names(), state.slots))[name]

    # -- subclass interface ---------------------------------------------------------------------
    def slot_names(self) -> tuple:
        return ()

    def _initial_slot_value(self, name) -> float:
        return 0.0

    def _step(self, slots, dtype, lr):
        """``(kernel, slot arguments, hyperparameters)``: the kernel is called as
        ``kernel(var, *slot_arguments, g, *clip_args, *hyperparameters)`` and returns the new
        variable and the new slots, in ``slot_names()`` order."""
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------------
    def _state_for(self, var):
        state = self._state.get(id(var))
        if state is None or state.var is not var:   # (an id can be reused after a variable dies)
            state = self._state[id(var)] = _VariableState(var, self.slot_names(),
                                                          self._initial_slot_value)
        return state

    def _clip_parameters(self, grads):
        """Per gradient ``(mode, g_mul, g_div, lo, hi)`` for :func:`_effective_grad`."""
        off = [(NO_CLIP, 1.0, 1.0, -math.inf, math.inf)] * len(grads)
        if self.clipnorm is not None and self.clipnorm > 0:
            sumsq = _kernel(_sum_of_squares, self.target)
            norms = [math.sqrt(sumsq(g)) for g in grads]
            return [(SCALE, self.clipnorm, max(n, self.clipnorm) if not math.isnan(n) else n,
                     -math.inf, math.inf) for n in norms]
        if self.global_clipnorm is not None and self.global_clipnorm > 0:
            sumsq = _kernel(_sum_of_squares, self.target)
            norm = math.sqrt(sum(float(sumsq(g)) for g in grads))   # (fsum raises on overflow)
            scale = float(global_norm_scale(np.float64(norm), float(self.global_clipnorm)))
            return [(SCALE, scale, 1.0, -math.inf, math.inf)] * len(grads)
        if self.clipvalue is not None and self.clipvalue > 0:
            return [(VALUE, 1.0, 1.0, -float(self.clipvalue), float(self.clipvalue))] * len(grads)
        return off


class _VariableState:
    """A variable's slots, their spare buffers and the scratch array its kernel writes."""

    def __init__(self, var, names, initial):
        def fresh():
            return tuple(np.full(var.shape, initial(n), dtype=var.dtype) for n in names)
        self.var = var
        self.slots, self.spare = fresh(), fresh()
        self.scratch = np.empty(var.shape, dtype=var.dtype)


def _scalar(value, dtype):
    return np.asarray(value, dtype=dtype)


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum; Keras ``SGD`` (defaults
    ``learning_rate=0.01, momentum=0.0, nesterov=False``)::

        velocity = momentum * velocity - learning_rate * g      # when momentum != 0
        w = w + velocity                                          # or, nesterov:
        w = w + momentum * velocity - learning_rate * g
        w = w - learning_rate * g                                 # when momentum == 0
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs):
        super().__init__(learning_rate, **kwargs)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"`momentum` must be a float between [0, 1], got {momentum}")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)

    def slot_names(self):
        return ("momentum",) if self.momentum != 0 else ()

    def _step(self, slots, dt, lr):
        if not slots:
            return _sgd_kernel, (), (_scalar(lr, dt),)
        return (_sgd_momentum_kernel, slots,
                (_scalar(lr, dt), _scalar(self.momentum, dt), self.nesterov))


class Adam(Optimizer):
    """Adam (Kingma & Ba), Keras ``Adam`` (defaults ``learning_rate=0.001, beta_1=0.9,
    beta_2=0.999, epsilon=1e-7, amsgrad=False``); ``epsilon`` is the paper's "epsilon hat"::

        t = iterations + 1
        alpha = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m = m + (g - m) * (1 - beta_1)
        v = v + (g*g - v) * (1 - beta_2)
        v_hat = maximum(v_hat, v)                  # amsgrad only; then v_hat is used for v
        w = w - m * alpha / (sqrt(v) + epsilon)
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.amsgrad = bool(amsgrad)

    def slot_names(self):
        return ("m", "v", "v_hat") if self.amsgrad else ("m", "v")

    def _step(self, slots, dt, lr):
        t = float(self.iterations + 1)
        beta_1_power = float(np.power(np.asarray(self.beta_1, dt), np.asarray(t, dt)))
        beta_2_power = float(np.power(np.asarray(self.beta_2, dt), np.asarray(t, dt)))
        alpha = lr * math.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        hyper = (_scalar(alpha, dt), _scalar(1 - self.beta_1, dt), _scalar(1 - self.beta_2, dt),
                 _scalar(self.epsilon, dt))
        return _adam_amsgrad_kernel if self.amsgrad else _adam_kernel, slots, hyper


class RMSProp(Optimizer):
    """RMSProp, Keras ``RMSprop`` (defaults ``learning_rate=0.001, rho=0.9, momentum=0.0,
    epsilon=1e-7, centered=False``; slots start at zero)::

        velocity = rho * velocity + (1 - rho) * g*g
        average_grad = rho * average_grad + (1 - rho) * g          # centered only
        denominator = velocity + epsilon                            # or, centered:
        denominator = velocity - average_grad*average_grad + epsilon
        increment = learning_rate * g / sqrt(denominator)
        moment = momentum * moment + increment; w = w - moment      # when momentum > 0
        w = w - increment                                           # otherwise

    (Keras 2 wrote ``lr * g * rsqrt(denominator)``; the same up to rounding.)
    """

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                 centered=False, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.rho, self.momentum, self.epsilon = float(rho), float(momentum), float(epsilon)
        self.centered = bool(centered)

    def slot_names(self):
        return (("velocity",) + (("average_gradient",) if self.centered else ())
                + (("momentum",) if self.momentum > 0 else ()))

    def _step(self, slots, dt, lr):
        hyper = (_scalar(lr, dt), _scalar(self.rho, dt), _scalar(1 - self.rho, dt),
                 _scalar(self.epsilon, dt))
        if len(slots) == 1:
            return _rmsprop_kernel, slots, hyper
        average_grad = slots[1] if self.centered else None
        moment = slots[-1] if self.momentum > 0 else None
        return (_rmsprop_general_kernel, (slots[0], average_grad, moment),
                hyper + (_scalar(self.momentum, dt),))


RMSprop = RMSProp   # the Keras spelling


class AdamW(Adam):
    """Adam with decoupled weight decay, Keras ``AdamW`` (defaults ``learning_rate=0.001,
    weight_decay=0.004``, the rest as :class:`Adam`): each step first does
    ``w = w - w * weight_decay * learning_rate``, then the Adam update."""

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, **kwargs):
        if weight_decay is None:
            raise ValueError("AdamW needs a weight_decay (use Adam for none)")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad,
                         weight_decay=weight_decay, **kwargs)


class Adagrad(Optimizer):
    """Adagrad, Keras ``Adagrad`` (defaults ``learning_rate=0.001,
    initial_accumulator_value=0.1, epsilon=1e-7``)::

        accumulator = accumulator + g*g
        w = w - learning_rate * g / sqrt(accumulator + epsilon)

    (The TF 2.0-2.10 ``tf.keras`` Adagrad put epsilon outside the square root.)
    """

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    def slot_names(self):
        return ("accumulator",)

    def _initial_slot_value(self, name):
        return self.initial_accumulator_value

    def _step(self, slots, dt, lr):
        return _adagrad_kernel, slots, (_scalar(lr, dt), _scalar(self.epsilon, dt))
