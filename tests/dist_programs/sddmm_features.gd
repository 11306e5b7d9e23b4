# Element-wise messages of both endpoints in P3's layer 1 (fused to sddmm mul
# and sub): column-separable, so partition = features runs them on each rank's
# feature columns (was refused: "not column-separable").
graph G (symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    scatter m = tanh(src.h) * sigmoid(dst.h) + (src.h - dst.h) * 0.5
    gather a = mean(m, to = src)
    transform t = a @ W
    apply out = t + b
    return out
}

model M[hidden = 16] {
    h = elu(L[hidden](X))
    return L[C](h)
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
}
