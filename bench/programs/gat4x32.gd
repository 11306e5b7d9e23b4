# gat.gd shaped, 4 heads x 32 (bench): two GATConv layers, dropout 0.6
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer GATConv[dout, heads = 8](h: [din]) -> [heads, dout] {
    param W  : f32[din, heads, dout] = glorot
    param al : f32[heads, dout] = glorot
    param ar : f32[heads, dout] = glorot
    param b  : f32[heads, dout] = zeros
    transform z = h @ W
    sync      zs = sum(z)
    scatter   s = leaky_relu(dot(src.zs, al) + dot(dst.zs, ar), 0.2)
    scatter   alpha = edge_softmax(s)
    scatter   m = alpha * src.zs
    gather    a = sum(m)
    apply     out = a + b
    return out
}

model GAT[hidden = 32, heads = 4, p = 0.6] {
    h = dropout(X, p)
    h = flatten(elu(GATConv[hidden, heads](h)))
    h = dropout(h, p)
    return mean(GATConv[C, 1](h), 0)
}

train bench {
    model     = GAT[hidden = 32, heads = 4]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.005, weight_decay = 5e-4)
    epochs    = 10
}
