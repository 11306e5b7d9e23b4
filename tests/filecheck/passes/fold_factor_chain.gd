# A left-associated chain of edge factors (GCN's norm written as two
# factors, a division then a product) gathers into one edge_const, so the
# message is `src.h * w` and a dense_first hint holds.
graph G (self_loops, symmetric)
input X : vertex f32[F]
input w : edge f32
input Y : vertex label[C]
mask train

layer GCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(src.degree) * rsqrt(dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    return t
}

layer WConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = 2 * src.h / max(dst.degree, 1) * w
    gather    a = sum(m)
    transform t = a @ W
    return t
}

model M { return WConv[C](relu(GCNConv[16](X))) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

schedule { order = dense_first }

# RUN: gdsl compile %s --print-ir-after=fold-edge-constants | filecheck %s

# CHECK: // ----- IR after fold-edge-constants -----
# CHECK: %w{{.*}} : edge f32[E] = edge_const[expr=1/(sqrt(dst_degree)*sqrt(src_degree)), stage=scatter]
# CHECK-NEXT: %m : edge f32[E, F] = mul[stage=scatter] %{{.*}}, %w
# CHECK: edge_const[expr=2*w/Max(1, dst_degree), stage=scatter]
# CHECK-NOT: edge_const
# CHECK: return
