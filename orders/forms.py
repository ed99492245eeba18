"""The order form: amount, currency, card and callback URL, plus a formset of items."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from .models import CURRENCIES
from .workflows import (
    CALLBACK_URL_MAX_LENGTH,
    MAX_ITEMS,
    MAX_QUANTITY,
    AmountError,
    amount_parse,
    callback_url_validator,
)

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
    def clean(self) -> None:
        """At least one item, said once. Django's own check (validate_min) counts only rows that
        changed from their initial values, so an untouched row got "Please submit at least 1
        form." next to its own "This field is required."; a row with errors already says what
        is missing."""
        if any(self.errors):
            return
        if not self.items():
            raise forms.ValidationError("Add at least one item.", code="too_few_forms")

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
    validate_min=False,  # BaseItemFormSet.clean says it, once
    max_num=MAX_ITEMS,
    validate_max=True,
    absolute_max=MAX_ITEMS,
    can_delete=True,
)


class AmountFormField(forms.CharField):
    """The amount as typed, checked by the order rule (`amount_parse`): format and range here,
    the currency's decimals in `OrderForm.clean`. A text input (inputmode decimal), so what the
    person typed reaches the rule as is - a number input would turn "1,5" into an empty value."""

    def to_python(self, value: Any) -> Decimal | None:  # type: ignore[override]
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return amount_parse(text, currency=None)
        except AmountError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class CallbackUrlFormField(forms.URLField):
    """An http(s) URL, validated once by the order rule (Django's own URLValidator is replaced,
    not added to: two validators gave the same message twice)."""

    default_validators = [callback_url_validator]


class OrderForm(forms.Form):
    amount = AmountFormField(
        label="Amount",
        widget=forms.TextInput(attrs={"inputmode": "decimal", "placeholder": "25.00", "autocomplete": "off"}),
        help_text="Two decimals at most; whole amounts for JPY and KRW.",
    )
    currency = forms.ChoiceField(label="Currency", choices=[(c, c) for c in CURRENCIES], initial="EUR")
    card = forms.ChoiceField(label="Payment card", choices=CARD_CHOICES, initial="tok_ok")
    callback_url = CallbackUrlFormField(
        label="Callback URL (optional)",
        required=False,
        max_length=CALLBACK_URL_MAX_LENGTH,
        assume_scheme="https",
        help_text="Each event of the order is POSTed here, signed with your webhook secret.",
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/hooks/orders"}),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        amount, currency = cleaned.get("amount"), cleaned.get("currency")
        if amount is not None and currency:
            try:  # the currency's decimals, now that both fields are known
                cleaned["amount"] = amount_parse(amount, currency=currency)
            except AmountError as exc:
                self.add_error("amount", str(exc))
        return cleaned
