# Regression on a second vertex input T (an .npz `node_T` array; no labels):
# T is the mse target and is also read in a scatter (src.T), so the ranks
# exchange its halo rows. The loss mask is a mask of another name.
graph G (self_loops)
input X : vertex f32[F]
input T : vertex f32[2]
mask labelled

layer Conv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    return t
}

layer TMix[dout](h: [din]) -> [dout] {
    param V : f32[2, dout] = glorot
    scatter   m = src.T
    gather    a = mean(m)
    transform t = a @ V
    apply     o = h + t
    return o
}

model M[hidden = 8] {
    h = relu(Conv[hidden](X))
    h = TMix[hidden](h)
    return Conv[2](h)
}

train t {
    model     = M
    loss      = mse(T, mask = labelled)
    optimizer = adam(lr = 0.01)
    epochs    = 20
}
