# GraphSAGE-pool: an MLP on each neighbour, then max aggregation
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer SAGEPool[dout, dpool = 32](h: [din]) -> [dout] {
    param Wp : f32[din, dpool] = glorot
    param bp : f32[dpool] = zeros
    param Ws : f32[din, dout] = glorot
    param Wn : f32[dpool, dout] = glorot
    param b  : f32[dout] = zeros
    transform p = h @ Wp
    sync      ps = sum(p)
    apply     q = relu(ps + bp)
    scatter   m = src.q
    gather    a = max(m)
    transform t = h @ Ws + a @ Wn
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model SAGEMax[hidden = 32, p = 0.5] {
    h = dropout(X, p)
    h = relu(SAGEPool[hidden](h))
    h = dropout(h, p)
    return SAGEPool[C, dpool = hidden](h)
}

train cora {
    model     = SAGEMax[hidden = 16]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
