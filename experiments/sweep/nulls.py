"""One kind of missing value in a results table: null (None in Parquet, an empty field in CSV,
NaN once read by pandas), where rows write the placeholders ``"-"`` (no fusion or order decision,
no dependence rule) or ``""`` (no instance file)."""
from __future__ import annotations

import pandas as pd

PLACEHOLDERS = ("-", "")


def as_nulls(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every placeholder in a text column replaced by None."""
    table = table.copy()
    for column in table.columns:
        if table[column].dtype == object or pd.api.types.is_string_dtype(table[column]):
            table[column] = table[column].astype(object).where(~table[column].isin(PLACEHOLDERS), None)
    return table
