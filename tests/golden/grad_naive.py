def grad_naive(x, t):
    # line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t1 = np.exp(x)
    t2 = np.sum(t1)
    # grad of line 10: return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))
    t3 = t / (t1 / t2)
    b_x = (np.sum(t3 * t1) / (t2 * t2) - t3 / t2) * t1
    return b_x
