# kernel: one GATConv(128 -> 4 heads x 32) layer, as in gat.gd
graph G (self_loops)
input X : vertex f32[F]

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

model M[hidden = 32, heads = 4] {
    return GATConv[hidden, heads](X)
}
