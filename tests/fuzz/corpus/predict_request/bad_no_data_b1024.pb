
transformer_quantile
€