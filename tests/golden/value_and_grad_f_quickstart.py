def value_and_grad_f(x, y):
    # generated for x: float64[n], y: float64[n]
    if np.ndim(x) != 1 or np.result_type(x).kind != 'f': raise ValueError(f'x: expected float64[n], got {np.result_type(x)} of shape {np.shape(x)}; regenerate with .source_for(...)')
    if np.ndim(y) != 1 or np.result_type(y).kind != 'f': raise ValueError(f'y: expected float64[n], got {np.result_type(y)} of shape {np.shape(y)}; regenerate with .source_for(...)')
    if np.shape(x)[0] != np.shape(y)[0]: raise ValueError(f'x.shape[0], y.shape[0]: expected one size (n), got {np.shape(x)[0]}, {np.shape(y)[0]}; regenerate with .source_for(...)')
    # line 10: return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
    t1 = np.sin(y)
    t2 = np.exp(-x * x)
    t3 = y * y
    t4 = np.log1p(t3)
    # line 9: z = x * y
    z = x * y
    # line 10: return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
    t5 = np.tanh(z)
    # grad of line 10: return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
    b_z = 1.0 - t5 * t5
    t6 = t4 * t2 * x
    b_x = b_z * y - t6 - t6 + t1
    t7 = t2 / (1.0 + t3) * y
    b_y = b_z * x + t7 + t7 + x * np.cos(y)
    return x * t1 + t2 * t4 + t5, (b_x, b_y)
