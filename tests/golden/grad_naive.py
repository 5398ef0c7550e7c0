def grad_naive(x, t):
    # generated for x: float64[n], t: float64[n]
    if np.ndim(x) != 1 or np.result_type(x).kind != 'f': raise ValueError(f'x: expected float64[n], got {np.result_type(x)} of shape {np.shape(x)}; regenerate with .source_for(...)')
    if np.ndim(t) != 1 or np.result_type(t).kind != 'f': raise ValueError(f't: expected float64[n], got {np.result_type(t)} of shape {np.shape(t)}; regenerate with .source_for(...)')
    if np.shape(x)[0] != np.shape(t)[0]: raise ValueError(f'x.shape[0], t.shape[0]: expected one size (n), got {np.shape(x)[0]}, {np.shape(t)[0]}; regenerate with .source_for(...)')
    # line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t1 = np.exp(x)
    t2 = np.sum(t1)
    # grad of line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t3 = t / (t1 / t2)
    b_x = (np.sum(t3 * t1) / (t2 * t2) - t3 / t2) * t1
    return b_x
