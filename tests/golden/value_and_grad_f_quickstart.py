def value_and_grad_f(x, y):
    # generated for x: float64[n], y: float64[n]
    if (np.ndim(x) != 1 or np.ndim(y) != 1 or len(x) != len(y)
            or {np.result_type(a).kind for a in (x, y)} != {'f'}):
        raise ValueError(f'expected x: float64[n], y: float64[n]; got x: {np.result_type(x)}'
                         f'{list(np.shape(x))}, y: {np.result_type(y)}{list(np.shape(y))}; '
                         'regenerate with .source_for(...)')
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
