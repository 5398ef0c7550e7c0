def grad_stop_gradient_max(x, t):
    # line 19: z = x - sg.stop_gradient(sg.reduce_max(x))
    z = x - np.max(x)
    # line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    t1 = np.exp(z)
    # grad of line 20: return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))
    b_x = np.sum(t) / np.sum(t1) * t1 - t
    return b_x
