# GIN (Xu et al.): the vertex's own features scaled by (1 + eps), eps learned, before layer 1's product.
# P3's feature split refuses it (a learned factor on column slices); was: "a per-feature factor", which eps is not.
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GIN[dout, hid = 32](h: [din]) -> [dout] {
    param eps : f32[1] = zeros
    param W1 : f32[din, hid] = glorot
    param W2 : f32[hid, dout] = glorot
    scatter m = src.h
    gather a = sum(m)
    transform t = (h * (1 + eps) + a) @ W1
    apply u = relu(t)
    transform v = u @ W2
    return v
}

model M[hidden = 16] {
    return GIN[C](relu(GIN[hidden](X)))
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
    epochs = 20
}
