# element-wise max/min in P3's layer 1, on the feature columns: with a scalar and
# of two values of the region; and a scalar added / subtracted (either side).
# Column-separable, so partition = features runs it (was refused: "not
# column-separable (it mixes feature columns)").
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather a = sum(m)
    apply c = 1 - min(max(a, h) + 0.5, 0.9)
    transform t = c @ W
    return t
}

model M[hidden = 8] {
    h = relu(L[hidden](max(X, 0.25)))
    return L[C](h)
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
}
