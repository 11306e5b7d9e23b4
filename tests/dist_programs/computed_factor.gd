# a layer-1 factor computed from the graph (the largest neighbour degree: a gather,
# not a graph constant). partition = features refuses it (was: an internal shape
# error on the ranks).
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer WNorm[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter e = src.degree
    gather wd = max(e)
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather a = sum(m)
    apply n = a / (wd + 1)
    transform t = n @ W
    return t
}

model M[hidden = 8] {
    h = relu(WNorm[hidden](X))
    return WNorm[C](h)
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
}
