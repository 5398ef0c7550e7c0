def grad_max_subtracted(x, t):
    # generated for x: float64[n], t: float64[n]
    if (np.ndim(x) != 1 or np.ndim(t) != 1 or len(x) != len(t)
            or {np.result_type(a).kind for a in (x, t)} != {'f'}):
        raise ValueError(f'expected x: float64[n], t: float64[n]; got x: {np.result_type(x)}'
                         f'{list(np.shape(x))}, t: {np.result_type(t)}{list(np.shape(t))}; '
                         'regenerate with .source_for(...)')
    # line 14: z = x - sg.reduce_max(x)
    t1 = np.max(x)
    z = x - t1
    # line 15: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    t2 = np.exp(z)
    # grad of line 15: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    b_z = np.sum(t) / np.sum(t2) * t2 - t
    # grad of line 14: z = x - sg.reduce_max(x)
    t3 = x == t1
    b_x = b_z + np.where(t3, -np.sum(b_z) / np.sum(t3.astype(np.float64), keepdims=True), 0.0)
    return b_x
