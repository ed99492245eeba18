# Issue 28: the idempotency key generation of a step (a fast default: no table rewrite, no scan).

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0028_job_name_no_control_characters'),
    ]

    operations = [
        migrations.AddField(
            model_name='step',
            name='key_generation',
            field=models.IntegerField(db_default=1, default=1, help_text='Idempotency key generation: 1 is the first key; each resubmit after a definitive refusal sends under the next one.', validators=[django.core.validators.MinValueValidator(0)]),
        ),
    ]
