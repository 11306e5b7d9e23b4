"""Front end: Lark grammar, AST, checker and lowering to IR."""
