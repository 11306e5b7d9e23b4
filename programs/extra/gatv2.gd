# GATv2 (Brody et al., ICLR'22) with multi-head concat: the projection is one
# [din, heads * dout] matrix reshaped into heads; the heads are flattened
# (concatenated) between layers and averaged in the output layer
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GATv2Conv[dout, heads = 4](h: [din]) -> [heads, dout] {
    param Wl : f32[din, heads * dout] = glorot
    param Wr : f32[din, heads * dout] = glorot
    param a  : f32[heads, dout] = glorot
    param b  : f32[heads, dout] = zeros
    transform zl = h @ Wl
    transform zr = h @ Wr
    apply     xl = reshape(zl, [heads, dout])
    apply     xr = reshape(zr, [heads, dout])
    scatter   s = dot(leaky_relu(src.xl + dst.xr, 0.2), a)
    scatter   alpha = edge_softmax(s)
    scatter   m = alpha * src.xl
    gather    agg = sum(m)
    apply     out = agg + b
    return out
}

model GATv2[hidden = 8, heads = 4, p = 0.6] {
    h = dropout(X, p)
    h = flatten(elu(GATv2Conv[hidden, heads](h)))
    h = dropout(h, p)
    return mean(GATv2Conv[C, 2](h), 0)
}

train cora {
    model     = GATv2
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.005, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
