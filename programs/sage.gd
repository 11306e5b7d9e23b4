# GraphSAGE with mean aggregation (Hamilton et al., NeurIPS'17), as in P3 Listing 1
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer SAGEConv[dout](h: [din]) -> [dout] {
    param Ws : f32[din, dout] = glorot
    param Wn : f32[din, dout] = glorot
    param b  : f32[dout] = zeros
    scatter   m = src.h
    gather    a = mean(m)
    transform t = h @ Ws + a @ Wn
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model SAGE[hidden = 256, layers = 2, p = 0.5] {
    h = X
    repeat layers - 1 {
        h = dropout(relu(SAGEConv[hidden](h)), p)
    }
    return SAGEConv[C](h)
}

train products {
    model     = SAGE[hidden = 256, layers = 3]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.003)
    epochs    = 20
    eval      = accuracy(mask = val), accuracy(mask = test)
    batch_size = 1000
    fanout     = [15, 10, 5]
}
