from django.urls import path

from lab import views

urlpatterns = [
    path("", views.catalog, name="lab_catalog"),
    path("runs/", views.my_runs, name="lab_my_runs"),
    path("queue/", views.queue_view, name="lab_queue"),
    path("runs/<int:run_id>/", views.run_page, name="lab_run"),
    path("runs/<int:run_id>/events", views.run_events, name="lab_run_events"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="lab_run_cancel"),
    path("runs/<int:run_id>/points.csv", views.run_points_csv, name="lab_run_points_csv"),
    path("<slug:slug>/", views.lab_form, name="lab_form"),
]
