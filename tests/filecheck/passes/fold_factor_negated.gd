# Terms of an endpoint tensor and of it negated, `(-src.h) / c` and
# `-(src.h / c) * 2`: the negation moves onto the factor, so the sum is
# factored into one product, `src.h * w` with one edge_const, and a
# dense_first hint holds (was: refused, "does not fold to that form").
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * 0.5 - (-src.h) / max(dst.degree, 1) - (-(src.h / src.degree)) * 2
    gather    a = sum(m)
    transform t = a @ W
    return t
}

model M { return L[C](X) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

schedule { order = dense_first }

# RUN: gdsl compile %s --print-ir-after=fold-edge-constants | filecheck %s

# CHECK: // ----- IR after fold-edge-constants -----
# CHECK: %[[H:[0-9]+]] : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT: %w : edge f32[E] = edge_const[expr=1/2 + 1/Max(1, dst_degree) + 2/src_degree, stage=scatter]
# CHECK-NEXT: %m : edge f32[E, F] = mul[stage=scatter] %[[H]], %w
# CHECK-NOT: edge_const
# CHECK: return
