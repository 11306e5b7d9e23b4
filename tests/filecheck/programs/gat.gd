# GAT (Velickovic et al., ICLR'18)
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

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

model GAT[hidden = 8, heads = 8, p = 0.6] {
    h = dropout(X, p)
    h = flatten(elu(GATConv[hidden, heads](h)))
    h = dropout(h, p)
    return mean(GATConv[C, 1](h), 0)
}

train cora {
    model     = GAT
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.005, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}

schedule {
    partition = auto
    order     = auto
}

# RUN: gdsl compile %s --emit ast | filecheck %s --check-prefix=AST
# RUN: gdsl compile %s --emit ir | filecheck %s --check-prefix=LOWER
# RUN: gdsl compile %s --emit ir-opt | filecheck %s --check-prefix=OPT

# AST: Program {{.*}}
# AST-NEXT:   Graph G (self_loops)
# AST-NEXT:   Input X : vertex f32[F]
# AST-NEXT:   Input Y : vertex label[C]
# AST-NEXT:   Mask train, val, test
# AST-NEXT:   Layer GATConv[dout, heads = 8](h: [din]) -> [heads, dout]
# AST-NEXT:     Param W : f32[din, heads, dout] = glorot
# AST-NEXT:     Param al : f32[heads, dout] = glorot
# AST-NEXT:     Param ar : f32[heads, dout] = glorot
# AST-NEXT:     Param b : f32[heads, dout] = zeros
# AST-NEXT:     Stage transform z = (h @ W)
# AST-NEXT:     Stage sync zs = sum(z)
# AST-NEXT:     Stage scatter s = leaky_relu((dot(src.zs, al) + dot(dst.zs, ar)), 0.2)
# AST-NEXT:     Stage scatter alpha = edge_softmax(s)
# AST-NEXT:     Stage scatter m = (alpha * src.zs)
# AST-NEXT:     Stage gather a = sum(m)
# AST-NEXT:     Stage apply out = (a + b)
# AST-NEXT:     Return out
# AST-NEXT:   Model GAT[hidden = 8, heads = 8, p = 0.6]
# AST-NEXT:     Assign h = dropout(X, p)
# AST-NEXT:     Assign h = flatten(elu(GATConv[hidden, heads](h)))
# AST-NEXT:     Assign h = dropout(h, p)
# AST-NEXT:     Return mean(GATConv[C, 1](h), 0)
# AST-NEXT:   Train cora
# AST-NEXT:     Assign model = GAT
# AST-NEXT:     Assign loss = cross_entropy(Y, mask = train)
# AST-NEXT:     Assign optimizer = adam(lr = 0.005, weight_decay = 5e-4)
# AST-NEXT:     Assign epochs = 200
# AST-NEXT:     Assign eval = accuracy(mask = val), accuracy(mask = test)
# AST-NEXT:   Schedule
# AST-NEXT:     Assign partition = auto
# AST-NEXT:     Assign order = auto

# LOWER: module attrs {graph={self_loops=true}, schedule={order=auto, partition=auto}}
# LOWER: func @GATConv_0(%h : vertex f32[N, F]) attrs {layer=GATConv, static={dout=8, heads=8}} {
# LOWER-NEXT:   %W : param f32[F, 8, 8] = param[init=glorot, name=W]
# LOWER-NEXT:   %al : param f32[8, 8] = param[init=glorot, name=al]
# LOWER-NEXT:   %ar : param f32[8, 8] = param[init=glorot, name=ar]
# LOWER-NEXT:   %b : param f32[8, 8] = param[init=zeros, name=b]
# LOWER-NEXT:   %z : vertex f32[N, 8, 8] = matmul[partial=true, stage=transform] %h, %W
# LOWER-NEXT:   %zs : vertex f32[N, 8, 8] = sync[op=sum, stage=sync] %z
# LOWER-NEXT:   %0 : edge f32[E, 8, 8] = src[stage=scatter] %zs
# LOWER-NEXT:   %1 : edge f32[E, 8] = dot[stage=scatter] %0, %al
# LOWER-NEXT:   %2 : edge f32[E, 8, 8] = dst[stage=scatter] %zs
# LOWER-NEXT:   %3 : edge f32[E, 8] = dot[stage=scatter] %2, %ar
# LOWER-NEXT:   %4 : edge f32[E, 8] = add[stage=scatter] %1, %3
# LOWER-NEXT:   %s : edge f32[E, 8] = leaky_relu[slope=0.2, stage=scatter] %4
# LOWER-NEXT:   %alpha : edge f32[E, 8] = edge_softmax[stage=scatter] %s
# LOWER-NEXT:   %5 : edge f32[E, 8, 8] = src[stage=scatter] %zs
# LOWER-NEXT:   %m : edge f32[E, 8, 8] = mul[broadcast=lead, stage=scatter] %alpha, %5
# LOWER-NEXT:   %a : vertex f32[N, 8, 8] = gather[reduce=sum, stage=gather, to=dst] %m
# LOWER-NEXT:   %out : vertex f32[N, 8, 8] = add[stage=apply] %a, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @GATConv_1(%h : vertex f32[N, 64]) attrs {layer=GATConv, static={dout=C, heads=1}} {
# LOWER-NEXT:   %W : param f32[64, 1, C] = param[init=glorot, name=W]
# LOWER-NEXT:   %al : param f32[1, C] = param[init=glorot, name=al]
# LOWER-NEXT:   %ar : param f32[1, C] = param[init=glorot, name=ar]
# LOWER-NEXT:   %b : param f32[1, C] = param[init=zeros, name=b]
# LOWER-NEXT:   %z : vertex f32[N, 1, C] = matmul[partial=true, stage=transform] %h, %W
# LOWER-NEXT:   %zs : vertex f32[N, 1, C] = sync[op=sum, stage=sync] %z
# LOWER-NEXT:   %0 : edge f32[E, 1, C] = src[stage=scatter] %zs
# LOWER-NEXT:   %1 : edge f32[E, 1] = dot[stage=scatter] %0, %al
# LOWER-NEXT:   %2 : edge f32[E, 1, C] = dst[stage=scatter] %zs
# LOWER-NEXT:   %3 : edge f32[E, 1] = dot[stage=scatter] %2, %ar
# LOWER-NEXT:   %4 : edge f32[E, 1] = add[stage=scatter] %1, %3
# LOWER-NEXT:   %s : edge f32[E, 1] = leaky_relu[slope=0.2, stage=scatter] %4
# LOWER-NEXT:   %alpha : edge f32[E, 1] = edge_softmax[stage=scatter] %s
# LOWER-NEXT:   %5 : edge f32[E, 1, C] = src[stage=scatter] %zs
# LOWER-NEXT:   %m : edge f32[E, 1, C] = mul[broadcast=lead, stage=scatter] %alpha, %5
# LOWER-NEXT:   %a : vertex f32[N, 1, C] = gather[reduce=sum, stage=gather, to=dst] %m
# LOWER-NEXT:   %out : vertex f32[N, 1, C] = add[stage=apply] %a, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @main() {
# LOWER-NEXT:   %X : vertex f32[N, F] = input[name=X]
# LOWER-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# LOWER-NEXT:   %h : vertex f32[N, F] = dropout[p=0.6] %X
# LOWER-NEXT:   # GATConv_1
# LOWER-NEXT:   %0 : vertex f32[N, 8, 8] = call[callee=GATConv_0, layer=GATConv, static={dout=8, heads=8}] %h
# LOWER-NEXT:   %1 : vertex f32[N, 8, 8] = elu %0
# LOWER-NEXT:   %h_1 : vertex f32[N, 64] = flatten %1
# LOWER-NEXT:   %h_2 : vertex f32[N, 64] = dropout[p=0.6] %h_1
# LOWER-NEXT:   # GATConv_2
# LOWER-NEXT:   %2 : vertex f32[N, 1, C] = call[callee=GATConv_1, layer=GATConv, static={dout=C, heads=1}] %h_2
# LOWER-NEXT:   %3 : vertex f32[N, C] = reduce[axis=0, fn=mean] %2
# LOWER-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %3, %Y
# LOWER-NEXT:   return %3
# LOWER-NEXT: }

# OPT: module attrs {graph={self_loops=true}, schedule={order=auto, partition=auto}}
# OPT: func @main() {
# OPT-NEXT:   %X : vertex f32[N, F] = input[name=X]
# OPT-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# OPT-NEXT:   %h : vertex f32[N, F] = dropout[p=0.6] %X
# OPT-NEXT:   # GATConv_1
# OPT-NEXT:   %W : param f32[F, 8, 8] = param[init=glorot, name=GATConv_1.W]
# OPT-NEXT:   %al : param f32[8, 8] = param[init=glorot, name=GATConv_1.al]
# OPT-NEXT:   %ar : param f32[8, 8] = param[init=glorot, name=GATConv_1.ar]
# OPT-NEXT:   %b : param f32[8, 8] = param[init=zeros, name=GATConv_1.b]
# OPT-NEXT:   %z : vertex f32[N, 8, 8] = matmul[partial=true, stage=transform] %h, %W
# OPT-NEXT:   %zs : vertex f32[N, 8, 8] = sync[op=sum, stage=sync] %z
# OPT-NEXT:   %0 : edge f32[E, 8, 8] = src[stage=scatter] %zs
# OPT-NEXT:   %1 : edge f32[E, 8] = dot[stage=scatter] %0, %al
# OPT-NEXT:   %2 : edge f32[E, 8, 8] = dst[stage=scatter] %zs
# OPT-NEXT:   %3 : edge f32[E, 8] = dot[stage=scatter] %2, %ar
# OPT-NEXT:   %4 : edge f32[E, 8] = add[stage=scatter] %1, %3
# OPT-NEXT:   %s : edge f32[E, 8] = leaky_relu[slope=0.2, stage=scatter] %4
# OPT-NEXT:   %alpha : edge f32[E, 8] = edge_softmax[stage=scatter] %s
# OPT-NEXT:   %m : edge f32[E, 8, 8] = mul[broadcast=lead, stage=scatter] %alpha, %0
# OPT-NEXT:   %a : vertex f32[N, 8, 8] = gather[reduce=sum, stage=gather, to=dst] %m
# OPT-NEXT:   %out : vertex f32[N, 8, 8] = add[stage=apply] %a, %b
# OPT-NEXT:   %5 : vertex f32[N, 8, 8] = elu %out
# OPT-NEXT:   %h_1 : vertex f32[N, 64] = flatten %5
# OPT-NEXT:   %h_2 : vertex f32[N, 64] = dropout[p=0.6] %h_1
# OPT-NEXT:   # GATConv_2
# OPT-NEXT:   %W_1 : param f32[64, 1, C] = param[init=glorot, name=GATConv_2.W]
# OPT-NEXT:   %al_1 : param f32[1, C] = param[init=glorot, name=GATConv_2.al]
# OPT-NEXT:   %ar_1 : param f32[1, C] = param[init=glorot, name=GATConv_2.ar]
# OPT-NEXT:   %b_1 : param f32[1, C] = param[init=zeros, name=GATConv_2.b]
# OPT-NEXT:   %z_1 : vertex f32[N, 1, C] = matmul[partial=true, stage=transform] %h_2, %W_1
# OPT-NEXT:   %zs_1 : vertex f32[N, 1, C] = sync[op=sum, stage=sync] %z_1
# OPT-NEXT:   %6 : edge f32[E, 1, C] = src[stage=scatter] %zs_1
# OPT-NEXT:   %7 : edge f32[E, 1] = dot[stage=scatter] %6, %al_1
# OPT-NEXT:   %8 : edge f32[E, 1, C] = dst[stage=scatter] %zs_1
# OPT-NEXT:   %9 : edge f32[E, 1] = dot[stage=scatter] %8, %ar_1
# OPT-NEXT:   %10 : edge f32[E, 1] = add[stage=scatter] %7, %9
# OPT-NEXT:   %s_1 : edge f32[E, 1] = leaky_relu[slope=0.2, stage=scatter] %10
# OPT-NEXT:   %alpha_1 : edge f32[E, 1] = edge_softmax[stage=scatter] %s_1
# OPT-NEXT:   %m_1 : edge f32[E, 1, C] = mul[broadcast=lead, stage=scatter] %alpha_1, %6
# OPT-NEXT:   %a_1 : vertex f32[N, 1, C] = gather[reduce=sum, stage=gather, to=dst] %m_1
# OPT-NEXT:   %out_1 : vertex f32[N, 1, C] = add[stage=apply] %a_1, %b_1
# OPT-NEXT:   %11 : vertex f32[N, C] = reduce[axis=0, fn=mean] %out_1
# OPT-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %11, %Y
# OPT-NEXT:   return %11
# OPT-NEXT: }
