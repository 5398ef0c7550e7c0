def grad_naive(x, t):
    # generated for x: float64[n], t: float64[n]
    if (np.ndim(x) != 1 or np.ndim(t) != 1 or len(x) != len(t)
            or {np.result_type(a).kind for a in (x, t)} != {'f'}):
        raise ValueError(f'expected x: float64[n], t: float64[n]; got x: {np.result_type(x)}'
                         f'{list(np.shape(x))}, t: {np.result_type(t)}{list(np.shape(t))}; '
                         'regenerate with .source_for(...)')
    # line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t1 = np.exp(x)
    t2 = np.sum(t1)
    # grad of line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t3 = t / (t1 / t2)
    b_x = (np.sum(t3 * t1) / (t2 * t2) - t3 / t2) * t1
    return b_x
