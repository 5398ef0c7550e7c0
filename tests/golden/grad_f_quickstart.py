def grad_f(x, y):
    # generated for x: float64 scalar, y: float64 scalar
    if np.shape(x) != () or np.shape(y) != () or {np.result_type(a).kind for a in (x, y)} != {'f'}:
        raise ValueError('expected x: float64 scalar, y: float64 scalar; '
                         f'got x: {np.result_type(x)}{list(np.shape(x))}, y: {np.result_type(y)}'
                         f'{list(np.shape(y))}; regenerate with .source_for(...)')
    # line 9: z = x * y
    z = x * y
    # line 10: return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
    t1 = np.tanh(z)
    t2 = y * y
    t3 = np.exp(-x * x)
    # grad of line 10: return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
    b_z = 1.0 - t1 * t1
    t4 = np.log1p(t2) * t3 * x
    b_x = b_z * y - t4 - t4 + np.sin(y)
    t5 = t3 / (1.0 + t2) * y
    b_y = b_z * x + t5 + t5 + x * np.cos(y)
    return b_x, b_y
