
transformer_quantile
Ð