from __future__ import annotations

from django import forms


class RepriceForm(forms.Form):
    percent = forms.CharField(
        label="Change every price by (%)",
        max_length=10,
        initial="5",
        help_text='A percentage such as "5" (raise by 5 %) or "-2.5" (lower by 2.5 %).',
    )
