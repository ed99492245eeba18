"""WebhookDelivery.event keeps no foreign key constraint: the run events become range-partitioned
by time (scheduler 0032, issue 29), and a partitioned table's id alone is no unique key."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0031_job_page_indexes'),
        ('webhooks', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='webhookdelivery',
            name='event',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='webhook_delivery', to='scheduler.runevent'),
        ),
    ]
