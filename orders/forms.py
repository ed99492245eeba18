"""The order form: amount, currency, card and callback URL, plus a formset of items."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import URLValidator

from .models import CURRENCIES
from .workflows import MAX_AMOUNT, MAX_ITEMS, MAX_QUANTITY

CARD_CHOICES = [
    ("tok_ok", "Test card that is approved (tok_ok)"),
    ("tok_decline", "Test card that is declined (tok_decline)"),
]


class ItemForm(forms.Form):
    sku = forms.CharField(
        label="SKU",
        max_length=64,
        widget=forms.TextInput(attrs={"placeholder": "e.g. SKU-1", "autocomplete": "off"}),
    )
    quantity = forms.IntegerField(label="Quantity", min_value=1, max_value=MAX_QUANTITY, initial=1)


class BaseItemFormSet(forms.BaseFormSet):
    def items(self) -> list[dict[str, Any]]:
        return [
            {"sku": f.cleaned_data["sku"].strip(), "quantity": f.cleaned_data["quantity"]}
            for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]


ItemFormSet = forms.formset_factory(
    ItemForm,
    formset=BaseItemFormSet,
    extra=0,
    min_num=1,
    validate_min=True,
    max_num=MAX_ITEMS,
    validate_max=True,
    absolute_max=MAX_ITEMS,
    can_delete=True,
)


class OrderForm(forms.Form):
    amount = forms.DecimalField(
        label="Amount",
        max_digits=12,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=MAX_AMOUNT,
        widget=forms.NumberInput(attrs={"step": "0.01", "placeholder": "25.00"}),
    )
    currency = forms.ChoiceField(label="Currency", choices=[(c, c) for c in CURRENCIES], initial="EUR")
    card = forms.ChoiceField(label="Payment card", choices=CARD_CHOICES, initial="tok_ok")
    callback_url = forms.URLField(
        label="Callback URL (optional)",
        required=False,
        max_length=2000,
        validators=[URLValidator(schemes=["http", "https"])],
        assume_scheme="https",
        help_text="Each event of the order is POSTed here, signed with your webhook secret.",
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/hooks/orders"}),
    )
