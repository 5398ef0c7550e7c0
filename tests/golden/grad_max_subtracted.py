def grad_max_subtracted(x, t):
    # generated for x: float64[n], t: float64[n]
    if np.ndim(x) != 1 or np.result_type(x).kind != 'f': raise ValueError(f'x: expected float64[n], got {np.result_type(x)} of shape {np.shape(x)}; regenerate with .source_for(...)')
    if np.ndim(t) != 1 or np.result_type(t).kind != 'f': raise ValueError(f't: expected float64[n], got {np.result_type(t)} of shape {np.shape(t)}; regenerate with .source_for(...)')
    if np.shape(x)[0] != np.shape(t)[0]: raise ValueError(f'x.shape[0], t.shape[0]: expected one size (n), got {np.shape(x)[0]}, {np.shape(t)[0]}; regenerate with .source_for(...)')
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
