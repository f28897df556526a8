
transformer_quantile
ÿÿÿÿÿÿÿÿÿ