def grad_stop_gradient_max(x, t):
    # generated for x: float64[n], t: float64[n]
    if np.ndim(x) != 1 or np.result_type(x).kind != 'f': raise ValueError(f'x: expected float64[n], got {np.result_type(x)} of shape {np.shape(x)}; regenerate with .source_for(...)')
    if np.ndim(t) != 1 or np.result_type(t).kind != 'f': raise ValueError(f't: expected float64[n], got {np.result_type(t)} of shape {np.shape(t)}; regenerate with .source_for(...)')
    if np.shape(x)[0] != np.shape(t)[0]: raise ValueError(f'x.shape[0], t.shape[0]: expected one size (n), got {np.shape(x)[0]}, {np.shape(t)[0]}; regenerate with .source_for(...)')
    # line 19: z = x - sg.stop_gradient(sg.reduce_max(x))
    z = x - np.max(x)
    # line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    t1 = np.exp(z)
    # grad of line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    b_x = np.sum(t) / np.sum(t1) * t1 - t
    return b_x
