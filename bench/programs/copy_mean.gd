# kernel: copy_src + mean (DGL copy_u-mean), no params
graph G
input X : vertex f32[F]

layer Agg(h: [d]) -> [d] {
    scatter m = src.h
    gather  a = mean(m)
    return a
}

model M {
    return Agg(X)
}
