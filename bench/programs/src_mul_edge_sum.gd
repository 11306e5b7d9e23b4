# kernel: src * edge scalar, summed (DGL u_mul_e-sum), no params
graph G
input X : vertex f32[F]
input w : edge f32

layer Agg(h: [d]) -> [d] {
    scatter m = src.h * w
    gather  a = sum(m)
    return a
}

model M {
    return Agg(X)
}
