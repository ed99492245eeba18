"""functions.sql changed after 0005 (a compensation's every attempt counts toward its alert
threshold): install it again."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0006_not_before_db_clock'),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
