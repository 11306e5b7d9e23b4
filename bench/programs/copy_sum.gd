# kernel: copy_src + sum (DGL copy_u-sum), no params
graph G
input X : vertex f32[F]

layer Agg(h: [d]) -> [d] {
    scatter m = src.h
    gather  a = sum(m)
    return a
}

model M {
    return Agg(X)
}
