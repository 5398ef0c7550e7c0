def grad_stop_gradient_max(x, t):
    # generated for x: float64[n], t: float64[n]
    if (np.ndim(x) != 1 or np.ndim(t) != 1 or len(x) != len(t)
            or {np.result_type(a).kind for a in (x, t)} != {'f'}):
        raise ValueError(f'expected x: float64[n], t: float64[n]; got x: {np.result_type(x)}'
                         f'{list(np.shape(x))}, t: {np.result_type(t)}{list(np.shape(t))}; '
                         'regenerate with .source_for(...)')
    # line 19: z = x - sg.stop_gradient(sg.reduce_max(x))
    z = x - np.max(x)
    # line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    t1 = np.exp(z)
    # grad of line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    b_x = np.sum(t) / np.sum(t1) * t1 - t
    return b_x
