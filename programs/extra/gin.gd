# GIN (Xu et al., ICLR'19): sum aggregation, (1 + eps) * h, a two-layer MLP in apply
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GINConv[dout, eps = 0](h: [din]) -> [dout] {
    param W1 : f32[din, dout] = glorot
    param b1 : f32[dout] = zeros
    param W2 : f32[dout, dout] = glorot
    param b2 : f32[dout] = zeros
    scatter m = src.h
    gather  a = sum(m)
    apply   z = (1 + eps) * h + a
    apply   out = relu(z @ W1 + b1) @ W2 + b2
    return out
}

model GIN[hidden = 32, p = 0.5, eps = 0.1] {
    h = relu(GINConv[hidden, eps](X))
    h = dropout(h, p)
    return GINConv[C, eps = eps](h)
}

train cora {
    model     = GIN[hidden = 16]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
