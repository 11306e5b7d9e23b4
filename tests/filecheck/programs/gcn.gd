# Two-layer GCN (Kipf & Welling, ICLR'17)
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model GCN[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = relu(GCNConv[hidden](h))
    h = dropout(h, p)
    return GCNConv[C](h)
}

train cora {
    model     = GCN[hidden = 16]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}

# RUN: gdsl compile %s --emit ast | filecheck %s --check-prefix=AST
# RUN: gdsl compile %s --emit ir | filecheck %s --check-prefix=LOWER
# RUN: gdsl compile %s --print-ir-after=inline | filecheck %s --check-prefix=INLINE
# RUN: gdsl compile %s --print-ir-after=insert-sync | filecheck %s --check-prefix=SYNC
# RUN: gdsl compile %s --print-ir-after=canonicalize | filecheck %s --check-prefix=CANON
# RUN: gdsl compile %s --emit ir-opt | filecheck %s --check-prefix=OPT
# RUN: gdsl compile %s --data cora --emit ir-opt | filecheck %s --check-prefix=CORA

# AST: Program {{.*}}
# AST-NEXT:   Graph G (self_loops, symmetric)
# AST-NEXT:   Input X : vertex f32[F]
# AST-NEXT:   Input Y : vertex label[C]
# AST-NEXT:   Mask train, val, test
# AST-NEXT:   Layer GCNConv[dout](h: [din]) -> [dout]
# AST-NEXT:     Param W : f32[din, dout] = glorot
# AST-NEXT:     Param b : f32[dout] = zeros
# AST-NEXT:     Stage scatter m = (src.h * rsqrt((src.degree * dst.degree)))
# AST-NEXT:     Stage gather a = sum(m)
# AST-NEXT:     Stage transform t = (a @ W)
# AST-NEXT:     Stage sync s = sum(t)
# AST-NEXT:     Stage apply out = (s + b)
# AST-NEXT:     Return out
# AST-NEXT:   Model GCN[hidden = 16, p = 0.5]
# AST-NEXT:     Assign h = dropout(X, p)
# AST-NEXT:     Assign h = relu(GCNConv[hidden](h))
# AST-NEXT:     Assign h = dropout(h, p)
# AST-NEXT:     Return GCNConv[C](h)
# AST-NEXT:   Train cora
# AST-NEXT:     Assign model = GCN[hidden = 16]
# AST-NEXT:     Assign loss = cross_entropy(Y, mask = train)
# AST-NEXT:     Assign optimizer = adam(lr = 0.01, weight_decay = 5e-4)
# AST-NEXT:     Assign epochs = 200
# AST-NEXT:     Assign eval = accuracy(mask = val), accuracy(mask = test)

# LOWER: module attrs {graph={self_loops=true, symmetric=true}}
# LOWER: func @GCNConv_0(%h : vertex f32[N, F]) attrs {layer=GCNConv, static={dout=16}} {
# LOWER-NEXT:   %W : param f32[F, 16] = param[init=glorot, name=W]
# LOWER-NEXT:   %b : param f32[16] = param[init=zeros, name=b]
# LOWER-NEXT:   %0 : edge f32[E, F] = src[stage=scatter] %h
# LOWER-NEXT:   %degree : vertex f32[N] = degree[stage=scatter]
# LOWER-NEXT:   %1 : edge f32[E] = src[stage=scatter] %degree
# LOWER-NEXT:   %degree_1 : vertex f32[N] = degree[stage=scatter]
# LOWER-NEXT:   %2 : edge f32[E] = dst[stage=scatter] %degree_1
# LOWER-NEXT:   %3 : edge f32[E] = mul[stage=scatter] %1, %2
# LOWER-NEXT:   %4 : edge f32[E] = rsqrt[stage=scatter] %3
# LOWER-NEXT:   %m : edge f32[E, F] = mul[stage=scatter] %0, %4
# LOWER-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# LOWER-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# LOWER-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# LOWER-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @GCNConv_1(%h : vertex f32[N, 16]) attrs {layer=GCNConv, static={dout=C}} {
# LOWER-NEXT:   %W : param f32[16, C] = param[init=glorot, name=W]
# LOWER-NEXT:   %b : param f32[C] = param[init=zeros, name=b]
# LOWER-NEXT:   %0 : edge f32[E, 16] = src[stage=scatter] %h
# LOWER-NEXT:   %degree : vertex f32[N] = degree[stage=scatter]
# LOWER-NEXT:   %1 : edge f32[E] = src[stage=scatter] %degree
# LOWER-NEXT:   %degree_1 : vertex f32[N] = degree[stage=scatter]
# LOWER-NEXT:   %2 : edge f32[E] = dst[stage=scatter] %degree_1
# LOWER-NEXT:   %3 : edge f32[E] = mul[stage=scatter] %1, %2
# LOWER-NEXT:   %4 : edge f32[E] = rsqrt[stage=scatter] %3
# LOWER-NEXT:   %m : edge f32[E, 16] = mul[stage=scatter] %0, %4
# LOWER-NEXT:   %a : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m
# LOWER-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# LOWER-NEXT:   %s : vertex f32[N, C] = sync[op=sum, stage=sync] %t
# LOWER-NEXT:   %out : vertex f32[N, C] = add[stage=apply] %s, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @main() {
# LOWER-NEXT:   %X : vertex f32[N, F] = input[name=X]
# LOWER-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# LOWER-NEXT:   %h : vertex f32[N, F] = dropout[p=0.5] %X
# LOWER-NEXT:   # GCNConv_1
# LOWER-NEXT:   %0 : vertex f32[N, 16] = call[callee=GCNConv_0, layer=GCNConv, static={dout=16}] %h
# LOWER-NEXT:   %h_1 : vertex f32[N, 16] = relu %0
# LOWER-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# LOWER-NEXT:   # GCNConv_2
# LOWER-NEXT:   %1 : vertex f32[N, C] = call[callee=GCNConv_1, layer=GCNConv, static={dout=C}] %h_2
# LOWER-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %1, %Y
# LOWER-NEXT:   return %1
# LOWER-NEXT: }

# INLINE: // ----- IR after inline -----
# INLINE-NEXT: module attrs {graph={self_loops=true, symmetric=true}}
# INLINE: func @main() {
# INLINE-NEXT:   %X : vertex f32[N, F] = input[name=X]
# INLINE-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# INLINE-NEXT:   %h : vertex f32[N, F] = dropout[p=0.5] %X
# INLINE-NEXT:   # GCNConv_1
# INLINE-NEXT:   %W : param f32[F, 16] = param[init=glorot, name=GCNConv_1.W]
# INLINE-NEXT:   %b : param f32[16] = param[init=zeros, name=GCNConv_1.b]
# INLINE-NEXT:   %0 : edge f32[E, F] = src[stage=scatter] %h
# INLINE-NEXT:   %degree : vertex f32[N] = degree[stage=scatter]
# INLINE-NEXT:   %1 : edge f32[E] = src[stage=scatter] %degree
# INLINE-NEXT:   %degree_1 : vertex f32[N] = degree[stage=scatter]
# INLINE-NEXT:   %2 : edge f32[E] = dst[stage=scatter] %degree_1
# INLINE-NEXT:   %3 : edge f32[E] = mul[stage=scatter] %1, %2
# INLINE-NEXT:   %4 : edge f32[E] = rsqrt[stage=scatter] %3
# INLINE-NEXT:   %m : edge f32[E, F] = mul[stage=scatter] %0, %4
# INLINE-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# INLINE-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# INLINE-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# INLINE-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# INLINE-NEXT:   %h_1 : vertex f32[N, 16] = relu %out
# INLINE-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# INLINE-NEXT:   # GCNConv_2
# INLINE-NEXT:   %W_1 : param f32[16, C] = param[init=glorot, name=GCNConv_2.W]
# INLINE-NEXT:   %b_1 : param f32[C] = param[init=zeros, name=GCNConv_2.b]
# INLINE-NEXT:   %5 : edge f32[E, 16] = src[stage=scatter] %h_2
# INLINE-NEXT:   %degree_2 : vertex f32[N] = degree[stage=scatter]
# INLINE-NEXT:   %6 : edge f32[E] = src[stage=scatter] %degree_2
# INLINE-NEXT:   %degree_3 : vertex f32[N] = degree[stage=scatter]
# INLINE-NEXT:   %7 : edge f32[E] = dst[stage=scatter] %degree_3
# INLINE-NEXT:   %8 : edge f32[E] = mul[stage=scatter] %6, %7
# INLINE-NEXT:   %9 : edge f32[E] = rsqrt[stage=scatter] %8
# INLINE-NEXT:   %m_1 : edge f32[E, 16] = mul[stage=scatter] %5, %9
# INLINE-NEXT:   %a_1 : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m_1
# INLINE-NEXT:   %t_1 : vertex f32[N, C] = matmul[partial=true, stage=transform] %a_1, %W_1
# INLINE-NEXT:   %s_1 : vertex f32[N, C] = sync[op=sum, stage=sync] %t_1
# INLINE-NEXT:   %out_1 : vertex f32[N, C] = add[stage=apply] %s_1, %b_1
# INLINE-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_1, %Y
# INLINE-NEXT:   return %out_1
# INLINE-NEXT: }

# SYNC: // ----- IR after insert-sync -----
# SYNC-NEXT: module attrs {graph={self_loops=true, symmetric=true}}
# SYNC: func @main() {
# SYNC-NEXT:   %X : vertex f32[N, F] = input[name=X]
# SYNC-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# SYNC-NEXT:   %h : vertex f32[N, F] = dropout[p=0.5] %X
# SYNC-NEXT:   # GCNConv_1
# SYNC-NEXT:   %W : param f32[F, 16] = param[init=glorot, name=GCNConv_1.W]
# SYNC-NEXT:   %b : param f32[16] = param[init=zeros, name=GCNConv_1.b]
# SYNC-NEXT:   %0 : edge f32[E, F] = src[stage=scatter] %h
# SYNC-NEXT:   %degree : vertex f32[N] = degree[stage=scatter]
# SYNC-NEXT:   %1 : edge f32[E] = src[stage=scatter] %degree
# SYNC-NEXT:   %degree_1 : vertex f32[N] = degree[stage=scatter]
# SYNC-NEXT:   %2 : edge f32[E] = dst[stage=scatter] %degree_1
# SYNC-NEXT:   %3 : edge f32[E] = mul[stage=scatter] %1, %2
# SYNC-NEXT:   %4 : edge f32[E] = rsqrt[stage=scatter] %3
# SYNC-NEXT:   %m : edge f32[E, F] = mul[stage=scatter] %0, %4
# SYNC-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# SYNC-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# SYNC-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# SYNC-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# SYNC-NEXT:   %h_1 : vertex f32[N, 16] = relu %out
# SYNC-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# SYNC-NEXT:   # GCNConv_2
# SYNC-NEXT:   %W_1 : param f32[16, C] = param[init=glorot, name=GCNConv_2.W]
# SYNC-NEXT:   %b_1 : param f32[C] = param[init=zeros, name=GCNConv_2.b]
# SYNC-NEXT:   %5 : edge f32[E, 16] = src[stage=scatter] %h_2
# SYNC-NEXT:   %degree_2 : vertex f32[N] = degree[stage=scatter]
# SYNC-NEXT:   %6 : edge f32[E] = src[stage=scatter] %degree_2
# SYNC-NEXT:   %degree_3 : vertex f32[N] = degree[stage=scatter]
# SYNC-NEXT:   %7 : edge f32[E] = dst[stage=scatter] %degree_3
# SYNC-NEXT:   %8 : edge f32[E] = mul[stage=scatter] %6, %7
# SYNC-NEXT:   %9 : edge f32[E] = rsqrt[stage=scatter] %8
# SYNC-NEXT:   %m_1 : edge f32[E, 16] = mul[stage=scatter] %5, %9
# SYNC-NEXT:   %a_1 : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m_1
# SYNC-NEXT:   %t_1 : vertex f32[N, C] = matmul[partial=true, stage=transform] %a_1, %W_1
# SYNC-NEXT:   %s_1 : vertex f32[N, C] = sync[op=sum, stage=sync] %t_1
# SYNC-NEXT:   %out_1 : vertex f32[N, C] = add[stage=apply] %s_1, %b_1
# SYNC-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_1, %Y
# SYNC-NEXT:   return %out_1
# SYNC-NEXT: }

# CANON: // ----- IR after canonicalize -----
# CANON-NEXT: module attrs {graph={self_loops=true, symmetric=true}}
# CANON: func @main() {
# CANON-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CANON-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CANON-NEXT:   %h : vertex f32[N, F] = dropout[p=0.5] %X
# CANON-NEXT:   # GCNConv_1
# CANON-NEXT:   %W : param f32[F, 16] = param[init=glorot, name=GCNConv_1.W]
# CANON-NEXT:   %b : param f32[16] = param[init=zeros, name=GCNConv_1.b]
# CANON-NEXT:   %0 : edge f32[E, F] = src[stage=scatter] %h
# CANON-NEXT:   %degree : vertex f32[N] = degree[stage=scatter]
# CANON-NEXT:   %1 : edge f32[E] = src[stage=scatter] %degree
# CANON-NEXT:   %2 : edge f32[E] = dst[stage=scatter] %degree
# CANON-NEXT:   %3 : edge f32[E] = mul[stage=scatter] %1, %2
# CANON-NEXT:   %4 : edge f32[E] = rsqrt[stage=scatter] %3
# CANON-NEXT:   %m : edge f32[E, F] = mul[stage=scatter] %0, %4
# CANON-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CANON-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# CANON-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# CANON-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# CANON-NEXT:   %h_1 : vertex f32[N, 16] = relu %out
# CANON-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# CANON-NEXT:   # GCNConv_2
# CANON-NEXT:   %W_1 : param f32[16, C] = param[init=glorot, name=GCNConv_2.W]
# CANON-NEXT:   %b_1 : param f32[C] = param[init=zeros, name=GCNConv_2.b]
# CANON-NEXT:   %5 : edge f32[E, 16] = src[stage=scatter] %h_2
# CANON-NEXT:   %m_1 : edge f32[E, 16] = mul[stage=scatter] %5, %4
# CANON-NEXT:   %a_1 : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m_1
# CANON-NEXT:   %t_1 : vertex f32[N, C] = matmul[partial=true, stage=transform] %a_1, %W_1
# CANON-NEXT:   %s_1 : vertex f32[N, C] = sync[op=sum, stage=sync] %t_1
# CANON-NEXT:   %out_1 : vertex f32[N, C] = add[stage=apply] %s_1, %b_1
# CANON-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_1, %Y
# CANON-NEXT:   return %out_1
# CANON-NEXT: }

# OPT: module attrs {graph={self_loops=true, symmetric=true}}
# OPT: func @main() {
# OPT-NEXT:   %X : vertex f32[N, F] = input[name=X]
# OPT-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# OPT-NEXT:   %h : vertex f32[N, F] = dropout[p=0.5] %X
# OPT-NEXT:   # GCNConv_1
# OPT-NEXT:   %W : param f32[F, 16] = param[init=glorot, name=GCNConv_1.W]
# OPT-NEXT:   %b : param f32[16] = param[init=zeros, name=GCNConv_1.b]
# OPT-NEXT:   %0 : edge f32[E, F] = src[stage=scatter] %h
# OPT-NEXT:   %w : edge f32[E] = edge_const[expr=1/sqrt(dst_degree*src_degree), stage=scatter]
# OPT-NEXT:   %m : edge f32[E, F] = mul[stage=scatter] %0, %w
# OPT-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# OPT-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# OPT-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# OPT-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# OPT-NEXT:   %h_1 : vertex f32[N, 16] = relu %out
# OPT-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# OPT-NEXT:   # GCNConv_2
# OPT-NEXT:   %W_1 : param f32[16, C] = param[init=glorot, name=GCNConv_2.W]
# OPT-NEXT:   %b_1 : param f32[C] = param[init=zeros, name=GCNConv_2.b]
# OPT-NEXT:   %1 : edge f32[E, 16] = src[stage=scatter] %h_2
# OPT-NEXT:   %m_1 : edge f32[E, 16] = mul[stage=scatter] %1, %w
# OPT-NEXT:   %a_1 : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m_1
# OPT-NEXT:   %t_1 : vertex f32[N, C] = matmul[partial=true, stage=transform] %a_1, %W_1
# OPT-NEXT:   %s_1 : vertex f32[N, C] = sync[op=sum, stage=sync] %t_1
# OPT-NEXT:   %out_1 : vertex f32[N, C] = add[stage=apply] %s_1, %b_1
# OPT-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_1, %Y
# OPT-NEXT:   return %out_1
# OPT-NEXT: }

# CORA: module attrs {dims={C=7, F=1433, N=2708}, graph={self_loops=true, symmetric=true}}
# CORA: func @main() {
# CORA-NEXT:   %X : vertex f32[N, 1433] = input[name=X]
# CORA-NEXT:   %Y : vertex i64[N] = input[classes=7, name=Y]
# CORA-NEXT:   %h : vertex f32[N, 1433] = dropout[p=0.5] %X
# CORA-NEXT:   # GCNConv_1
# CORA-NEXT:   %W : param f32[1433, 16] = param[init=glorot, name=GCNConv_1.W]
# CORA-NEXT:   %b : param f32[16] = param[init=zeros, name=GCNConv_1.b]
# CORA-NEXT:   %0 : edge f32[E, 1433] = src[stage=scatter] %h
# CORA-NEXT:   %w : edge f32[E] = edge_const[expr=1/sqrt(dst_degree*src_degree), stage=scatter]
# CORA-NEXT:   %m : edge f32[E, 1433] = mul[stage=scatter] %0, %w
# CORA-NEXT:   %a : vertex f32[N, 1433] = gather[reduce=sum, stage=gather, to=dst] %m
# CORA-NEXT:   %t : vertex f32[N, 16] = matmul[partial=true, stage=transform] %a, %W
# CORA-NEXT:   %s : vertex f32[N, 16] = sync[op=sum, stage=sync] %t
# CORA-NEXT:   %out : vertex f32[N, 16] = add[stage=apply] %s, %b
# CORA-NEXT:   %h_1 : vertex f32[N, 16] = relu %out
# CORA-NEXT:   %h_2 : vertex f32[N, 16] = dropout[p=0.5] %h_1
# CORA-NEXT:   # GCNConv_2
# CORA-NEXT:   %W_1 : param f32[16, 7] = param[init=glorot, name=GCNConv_2.W]
# CORA-NEXT:   %b_1 : param f32[7] = param[init=zeros, name=GCNConv_2.b]
# CORA-NEXT:   %1 : edge f32[E, 16] = src[stage=scatter] %h_2
# CORA-NEXT:   %m_1 : edge f32[E, 16] = mul[stage=scatter] %1, %w
# CORA-NEXT:   %a_1 : vertex f32[N, 16] = gather[reduce=sum, stage=gather, to=dst] %m_1
# CORA-NEXT:   %t_1 : vertex f32[N, 7] = matmul[partial=true, stage=transform] %a_1, %W_1
# CORA-NEXT:   %s_1 : vertex f32[N, 7] = sync[op=sum, stage=sync] %t_1
# CORA-NEXT:   %out_1 : vertex f32[N, 7] = add[stage=apply] %s_1, %b_1
# CORA-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_1, %Y
# CORA-NEXT:   return %out_1
# CORA-NEXT: }
