from django.urls import path

from mock import interviewer_views, views

urlpatterns = [
    path("", views.home, name="mock_home"),
    path("loops/<slug:slug>/", views.loop_page, name="mock_loop"),
    path("loops/<slug:slug>/start/", views.start, name="mock_start"),
    path("<int:mock_id>/", views.run_page, name="mock_run"),
    path("<int:mock_id>/finish/", views.finish, name="mock_finish"),
    path("<int:mock_id>/scorecard/", views.scorecard_page, name="mock_scorecard"),
    path("<int:mock_id>/invite/", views.invite, name="mock_invite"),
    path("<int:mock_id>/items/<int:order>/draft/", views.draft, name="mock_draft"),
    path("<int:mock_id>/items/<int:order>/answer/", views.answer, name="mock_answer"),
    path("<int:mock_id>/items/<int:order>/steps/", views.steps, name="mock_steps"),
    path(
        "<int:mock_id>/items/<int:order>/follow-ups/<int:index>/",
        views.follow_up,
        name="mock_follow_up",
    ),
    path("<int:mock_id>/items/<int:order>/next/", views.next_question, name="mock_next"),
    path("join/<str:token>/", interviewer_views.join, name="mock_join"),
    path("<int:mock_id>/interviewer/", interviewer_views.interviewer_page, name="mock_interviewer"),
    path("<int:mock_id>/interviewer/events", interviewer_views.events, name="mock_events"),
    path(
        "<int:mock_id>/interviewer/items/<int:order>/mark/",
        interviewer_views.mark,
        name="mock_mark",
    ),
]
