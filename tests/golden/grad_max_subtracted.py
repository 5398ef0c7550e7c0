def grad_max_subtracted(x, t):
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
