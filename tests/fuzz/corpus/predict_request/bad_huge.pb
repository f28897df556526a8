
transformer_quantile
€€€€€€€€@